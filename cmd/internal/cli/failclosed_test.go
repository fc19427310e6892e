package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/hook/nri"
	"github.com/nri-cni/nri-cni/nodeconf"
)

// The running nri-cni's check of the node is what `nri-cni status` shows:
// fail-open names the files checked and the fix.
func TestNodeCheckSavedForStatus(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/containerd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/containerd/config.toml"), []byte("version = 3\n"), 0o644))
	cfg := config.Default()
	cfg.FailClosed.NodeRoot = root
	rep := checkNode(cfg, "containerd", "v2.4.2", os.Getpid())
	require.False(t, rep.OK(), "no validator in the config")

	state := t.TempDir()
	var out bytes.Buffer
	printNodeCheck(&out, state)
	assert.Contains(t, out.String(), "fail-closed: unknown: nri-cni has not connected")
	require.NoError(t, saveNodeCheck(state, nodeCheck{Report: &rep, Checked: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}))
	out.Reset()
	printNodeCheck(&out, state)
	assert.Contains(t, out.String(), "fail-closed (checked 2026-11-27T12:00:00Z): containerd v2.4.2: not set up")
	assert.Contains(t, out.String(), "/etc/containerd/config.toml")
	assert.Contains(t, out.String(), "node-setup")
	entries, err := os.ReadDir(state)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temp file left")
	assert.Equal(t, nodeCheckFile, entries[0].Name(), "hidden: never taken for a record")
}

// The running runtime is judged from its process (the NRI connection's
// peer): set-up files written after it started are a restart pending, in
// `nri-cni status` too; written before it, fail-closed.
func TestNodeCheckJudgesTheRunningRuntime(t *testing.T) {
	root := t.TempDir()
	for p, data := range map[string][]byte{"etc/containerd/config.toml": nodeconf.MinimalContainerdConfig(),
		"etc/containerd/conf.d/10-nri-cni.toml": node.ContainerdDropIn()} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), data, 0o644))
	}
	cfg := config.Default()
	cfg.FailClosed.NodeRoot = root
	cfg.StateDir = t.TempDir()
	rep := checkNode(cfg, "containerd", "v2.4.2", os.Getpid()) // this test started before the files were written
	assert.Equal(t, nodeconf.StateRestartPending, rep.State())
	require.NoError(t, saveNodeCheck(cfg.StateDir, nodeCheck{Report: &rep, Checked: time.Now()}))
	var out bytes.Buffer
	printNodeCheck(&out, cfg.StateDir)
	assert.Contains(t, out.String(), "state: restart-pending: changed after the running containerd")
	assert.Contains(t, out.String(), "fix: restart containerd (systemctl restart containerd)")

	old := time.Now().Add(-24 * time.Hour)
	for _, p := range []string{"etc/containerd/config.toml", "etc/containerd/conf.d/10-nri-cni.toml"} {
		require.NoError(t, os.Chtimes(filepath.Join(root, p), old, old))
	}
	assert.Equal(t, nodeconf.StateFailClosed, checkNode(cfg, "containerd", "v2.4.2", os.Getpid()).State())
	assert.Equal(t, nodeconf.StateUnverified, checkNode(cfg, "containerd", "v2.4.2", 0).State(), "the runtime not visible")
}

// A missing or non-executable await hook binary is named, with its key, in
// `nri-cni status` and in the readiness probe's answer.
func TestAwaitHookBinaryCheck(t *testing.T) {
	root := t.TempDir()
	cfg := config.Default()
	cfg.BackgroundAttach = true
	cfg.FailClosed.NodeRoot, cfg.FailClosed.HookSocket, cfg.FailClosed.HookPath = root, "/run/nri-cni/await.sock", "/opt/nri-cni/bin/nri-cni"
	path, err := awaitHookBinary(cfg)
	require.NoError(t, err)
	assert.Equal(t, "/opt/nri-cni/bin/nri-cni", path)
	runnable := hookRunnable(cfg, path)
	err = runnable()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the await hook cannot run: /opt/nri-cni/bin/nri-cni is missing on the node (failClosed.hookPath)")

	state := t.TempDir()
	require.NoError(t, saveNodeCheck(state, nodeCheck{Checked: time.Now(), Hook: &hookCheck{Path: path, Problem: err.Error()}}))
	var out bytes.Buffer
	printNodeCheck(&out, state)
	assert.Contains(t, out.String(), "fail-closed: unknown: nri-cni has not connected to a runtime yet")
	assert.Contains(t, out.String(), "NOT RUNNABLE: the await hook cannot run: /opt/nri-cni/bin/nri-cni is missing on the node (failClosed.hookPath)")

	plugin := nri.New(nil, nil, logrus.NewEntry(logrus.New()))
	plugin.Hook = nri.Hook{Path: path, Socket: cfg.FailClosed.HookSocket, Runnable: runnable}
	ok, why := serving(plugin, nil)
	assert.False(t, ok)
	assert.Contains(t, why, "/opt/nri-cni/bin/nri-cni is missing on the node (failClosed.hookPath)")

	bin := filepath.Join(root, "opt/nri-cni/bin/nri-cni")
	require.NoError(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o644))
	assert.ErrorContains(t, runnable(), "/opt/nri-cni/bin/nri-cni is not executable (mode 0644)")
	require.NoError(t, os.Chmod(bin, 0o755))
	assert.NoError(t, runnable())
	_, why = serving(plugin, nil)
	assert.NotContains(t, why, "await hook", "only the connection now")

	cfg.FailClosed.HookSocket = ""
	path, err = awaitHookBinary(cfg)
	require.NoError(t, err)
	assert.Empty(t, path, "the hook is off")
}
