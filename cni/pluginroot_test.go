package cni

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestRootExecFindInPath(t *testing.T) {
	t.Parallel()
	root := testenv.HostLikeRoot(t)
	e := &rootExec{root: root}
	tests := []struct {
		name    string
		plugin  string
		paths   []string
		want    string // "" = an error
		wantErr string
	}{
		{"through a relative symlinked dir, the path inside the root", "bridge", []string{"/opt/cni/bin"}, "/opt/cni/bin/bridge", ""},
		{"first dir that has it", "host-local", []string{"/opt/cni/bin", "/opt/other"}, "/opt/other/host-local", ""},
		{"absolute symlink resolved in the root", "host-local", []string{"/opt/other"}, "/opt/other/host-local", ""},
		{"a directory is no plugin", "dir", []string{"/opt/other"}, "", "failed to find plugin"},
		{"nri-cni's own files do not count", "to-nri-cni-passwd", []string{"/opt/other"}, "", "under pluginRoot"},
		{"missing", "macvlan", []string{"/opt/cni/bin"}, "", `failed to find plugin "macvlan"`},
		{"no name", "", []string{"/opt/cni/bin"}, "", "no plugin name"},
		{"a path is no name", "../bridge", []string{"/opt/cni/bin"}, "", "invalid plugin name"},
		{"no dirs", "bridge", nil, "", "no paths"},
	}
	for _, tt := range tests {
		got, err := e.FindInPath(tt.plugin, tt.paths)
		if tt.wantErr != "" {
			assert.ErrorContains(t, err, tt.wantErr, tt.name)
			continue
		}
		assert.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, got, tt.name)
	}
}

func TestPluginRootOn(t *testing.T) {
	t.Parallel()
	for root, on := range map[string]bool{"": false, "/": false, "//": false, "/host": true, "/host/": true} {
		assert.Equal(t, on, PluginRootOn(root), "%q", root)
		assert.Equal(t, on, newRootExec(root, nil).root != "", "%q: chrooted", root)
	}
}

func TestPluginErr(t *testing.T) {
	t.Parallel()
	base := errors.New("exit status 1")
	tests := []struct {
		stdout, stderr, want string
		code                 uint
	}{
		{`{"code":7,"msg":"bad","details":"d"}`, "", "bad; d", 7},
		{"", "boom", `netplugin failed: "boom": exit status 1`, 0},
		{"", "", "netplugin failed with no error message: exit status 1", 0},
		{"not json", "", `netplugin failed but error parsing its diagnostic message "not json"`, 0},
	}
	for _, tt := range tests {
		err := pluginErr(base, []byte(tt.stdout), []byte(tt.stderr))
		var te *types.Error
		require.ErrorAs(t, err, &te)
		assert.Contains(t, te.Error(), tt.want)
		assert.Equal(t, tt.code, te.Code)
	}
}

// fakeRoot is a root with a static shell (busybox) and a fake plugin that
// reports what it sees: a marker file only this root has, its cwd, its
// args. Chroot needs root.
func fakeRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chroot)")
	}
	busybox := "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		t.Skip("needs a static busybox at /bin/busybox (Debian busybox-static: test/tools/install.sh apt)")
	}
	root := t.TempDir()
	data, err := os.ReadFile(busybox)
	require.NoError(t, err)
	testenv.WriteTree(t, root, map[string]string{
		"marker":                  "inside the fake root",
		"usr/bin/sh":              string(data),
		"bin":                     "->usr/bin",
		"run/netns/":              "",
		"var/run":                 "->/run",
		"usr/libexec/cni/":        "",
		"opt/cni/bin":             "->/usr/libexec/cni",
		"usr/libexec/cni/fakecni": fakePlugin,
	})
	return root
}

// fakePlugin answers VERSION and ADD; ADD's result carries what it saw
// as interface names (the marker, cwd, CNI_NETNS, CNI_PATH); FAIL fails.
const fakePlugin = `#!/bin/sh
read -r marker < /marker
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
ADD)
	cwd=$(pwd)
	echo "{\"cniVersion\":\"1.0.0\",\"interfaces\":[{\"name\":\"$marker\"},{\"name\":\"$cwd\"},{\"name\":\"$CNI_NETNS\"},{\"name\":\"$CNI_PATH\"}]}" ;;
FAIL) echo '{"code":11,"msg":"failed as asked"}'; exit 1 ;;
SLOW) while :; do :; done ;;
*) ;;
esac
`

func TestRootExecRunsChrooted(t *testing.T) {
	root := fakeRoot(t)
	// A "netns" outside the root and the same file inside it (a hard link,
	// as a bind mount shows it), and one that differs inside.
	outside := t.TempDir()
	same, other, gone := filepath.Join(outside, "same"), filepath.Join(outside, "other"), filepath.Join(outside, "gone")
	for _, p := range []string{same, other} {
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	testenv.WriteTree(t, root, map[string]string{strings.TrimPrefix(other, "/"): ""})
	require.NoError(t, os.MkdirAll(filepath.Join(root, outside), 0o755))
	require.NoError(t, os.Link(same, filepath.Join(root, same)))

	e := newRootExec(root, nil)
	path, err := e.FindInPath("fakecni", []string{"/opt/cni/bin"})
	require.NoError(t, err)
	require.Equal(t, "/opt/cni/bin/fakecni", path)

	env := func(cmd, netns string) []string {
		return []string{"CNI_COMMAND=" + cmd, "CNI_NETNS=" + netns, "CNI_PATH=/opt/cni/bin:/usr/lib/cni", "PATH=/usr/bin"}
	}
	tests := []struct {
		name    string
		env     []string
		want    []string // the ADD result's interface names
		wantErr error
		errText string
	}{
		{"ADD sees the root's files, cwd /, host paths", env("ADD", same),
			[]string{"inside the fake root", "/", same, "/opt/cni/bin:/usr/lib/cni"}, nil, ""},
		{"a /proc netns path is the host's /proc", env("ADD", "/proc/1/ns/net"),
			[]string{"inside the fake root", "/", "/proc/1/ns/net", "/opt/cni/bin:/usr/lib/cni"}, nil, ""},
		{"a netns nri-cni does not see is the plugin's business", env("ADD", gone),
			[]string{"inside the fake root", "/", gone, "/opt/cni/bin:/usr/lib/cni"}, nil, ""},
		{"a netns missing under the root is refused", env("ADD", filepath.Join(outside, "only-outside")), nil, ErrNetnsNotInRoot, "is missing under"},
		{"another file under the root is refused", env("DEL", other), nil, ErrNetnsNotInRoot, "is another file under"},
		{"the plugin's own error", env("FAIL", ""), nil, nil, "failed as asked"},
	}
	require.NoError(t, os.WriteFile(filepath.Join(outside, "only-outside"), nil, 0o644))
	for _, tt := range tests {
		out, err := e.ExecPlugin(context.Background(), path, []byte(`{}`), tt.env)
		if tt.wantErr != nil || tt.errText != "" {
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr, tt.name)
				assert.False(t, IsAlreadyGone(err), "%s: must not read as already gone: %v", tt.name, err)
			}
			assert.ErrorContains(t, err, tt.errText, tt.name)
			continue
		}
		require.NoError(t, err, tt.name)
		var res struct {
			Interfaces []struct{ Name string } `json:"interfaces"`
		}
		require.NoError(t, json.Unmarshal(out, &res), "%s: %s", tt.name, out)
		var names []string
		for _, i := range res.Interfaces {
			names = append(names, i.Name)
		}
		assert.Equal(t, tt.want, names, tt.name)
	}

	// The context bounds the plugin.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = e.ExecPlugin(ctx, path, nil, env("SLOW", ""))
	assert.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)

	// A path that is not there inside the root (it is outside).
	_, err = e.ExecPlugin(context.Background(), filepath.Join(root, "usr/libexec/cni/fakecni"), nil, env("ADD", ""))
	assert.ErrorContains(t, err, "no such file or directory")
}

// The engine: libcni's VERSION (config validation), ADD and the missing
// plugin check all go through the root.
func TestEngineWithPluginRoot(t *testing.T) {
	root := fakeRoot(t)
	confDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(confDir, "10-a.conflist"),
		[]byte(`{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"fakecni"}]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(confDir, "20-b.conflist"),
		[]byte(`{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"notthere"}]}`), 0o644))
	e := New(Options{ConfDir: confDir, BinDirs: []string{"/opt/cni/bin"}, CacheDir: t.TempDir(), PluginRoot: root})
	skipped, err := e.Reload(context.Background())
	require.NoError(t, err)
	require.Len(t, skipped, 1, "b's plugin is in no bin dir under the root")
	assert.Contains(t, skipped[0].Error(), "notthere")
	nets := e.Networks()
	require.Len(t, nets, 1)

	p, err := e.FindPlugin("fakecni")
	require.NoError(t, err)
	assert.Equal(t, "/opt/cni/bin/fakecni", p)
	_, err = e.FindPlugin("sh")
	assert.Error(t, err, "/usr/bin is no bin dir")

	res, err := e.cni.AddNetworkList(context.Background(), nets[0].List, &libcni.RuntimeConf{ContainerID: "c1", IfName: "net1"})
	require.NoError(t, err)
	raw, err := json.Marshal(res)
	require.NoError(t, err)
	assert.Contains(t, string(raw), "inside the fake root")

	// Without a root the same bin dir is nri-cni's own (empty here).
	plain := New(Options{ConfDir: confDir, BinDirs: []string{filepath.Join(t.TempDir(), "bin")}, CacheDir: t.TempDir()})
	_, err = plain.FindPlugin("fakecni")
	assert.Error(t, err)
}

// A plugin cut short by its deadline is killed with every process it
// started: portmap's iptables must not change the node after the rollback
// DEL that undoes the ADD. Before, only the plugin was killed, and the
// helper went on (and held the output pipe, so the call waited for it).
func TestTimedOutPluginIsKilledWithItsChildren(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile, marker := filepath.Join(dir, "child.pid"), filepath.Join(dir, "child-ran")
	plugin := filepath.Join(dir, "slowcni")
	require.NoError(t, os.WriteFile(plugin, []byte("#!/bin/sh\n"+
		"(echo $$ > /dev/null; sh -c 'echo $$ > "+pidFile+"; exec sleep 30' ; touch "+marker+") &\n"+
		"exec sleep 30\n"), 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := newRootExec("", nil).ExecPlugin(ctx, plugin, nil, []string{"CNI_COMMAND=ADD"})
	require.Error(t, err)
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err, "the plugin's child started")
	pid := strings.TrimSpace(string(data))
	require.Eventually(t, func() bool {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		// Gone, or a zombie waiting for its reaper: not running either way.
		return err != nil || strings.Contains(string(stat), ") Z ")
	}, 10*time.Second, 20*time.Millisecond, "the plugin's child %s is killed with it", pid)
	_, err = os.Stat(marker)
	assert.True(t, os.IsNotExist(err), "the subshell that was to run after the child is gone too")
}

// A plugin that succeeds but leaves a process holding its output (a
// helper it started without closing stdout) answers within waitDelay, with
// what it wrote; the helper is its own business. (libcni's exec waits for
// the helper to end.)
func TestPluginLeavingAHelperAnswers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "helper.pid")
	plugin := filepath.Join(dir, "helpercni")
	require.NoError(t, os.WriteFile(plugin, []byte("#!/bin/sh\n"+
		"sh -c 'echo $$ > "+pidFile+"; exec sleep 30' &\n"+
		"while [ ! -s "+pidFile+" ]; do sleep 0.01; done\n"+
		"echo '{\"cniVersion\":\"1.0.0\"}'\n"), 0o755))
	t.Cleanup(func() {
		if data, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	out, err := newRootExec("", nil).ExecPlugin(context.Background(), plugin, nil, []string{"CNI_COMMAND=ADD"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"cniVersion":"1.0.0"}`, string(out))
}
