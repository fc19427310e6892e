package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestRunPodSandboxTwiceAllocatesOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := e.newPod()
	require.NoError(t, e.run(p, p.pid))
	require.NoError(t, e.run(p, p.pid))
	assert.Len(t, e.ipamFiles(), 1)
	assert.Len(t, testenv.ReadCalls(t, e.record), 1, "one ADD")
	require.NoError(t, e.stop(p))
	require.NoError(t, e.remove(p))
	assert.Empty(t, e.ipamFiles())
}

// CRI-O removes the netns before it sends NRI StopPodSandbox.
func TestCRIOOrderingNetnsGoneBeforeStop(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := e.newPod()
	require.NoError(t, e.run(p, p.pid))
	testenv.DeleteNetNS(t, p.netns)

	require.NoError(t, e.stop(p))
	assert.Empty(t, e.ipamFiles(), "Stop released the IP with the empty-netns DEL")
	calls := testenv.ReadCalls(t, e.record)
	require.Len(t, calls, 2)
	assert.Equal(t, "DEL", calls[1].Cmd)
	assert.Empty(t, calls[1].Netns)
	require.NoError(t, e.remove(p))
	assert.Equal(t, 0, e.cacheEntries(p.id))
}

// A pinned path that is a bind mount of the host's netns is how CRI-O
// presents a hostNetwork pod: with the pid (if any) agreeing, the pod is
// skipped — it starts, and no CNI call ever runs in the host namespace. A pid
// in another namespace than the pinned host bind is still refused.
func TestPinnedBindOfHostNetnsIsAHostNetworkPod(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := e.newPod()
	hostBind := filepath.Join(e.root, "host-netns-bind")
	require.NoError(t, os.WriteFile(hostBind, nil, 0o600))
	require.NoError(t, unix.Mount("/proc/self/ns/net", hostBind, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(hostBind, unix.MNT_DETACH) })
	hostLinks := linkNames(t)

	for _, pid := range []int{0, os.Getpid()} { // infra dropped (Pid 0); infra kept (a host-netns pid)
		hostPod := &pod{id: p.id, netns: p.netns, pid: pid}
		req := hostPod.nri(pid, true)
		req.Linux.Namespaces[0].Path = hostBind
		require.NoError(t, e.runtime.RunPodSandbox(nriCtx(t), &api.RunPodSandboxRequest{Pod: req}), "pid %d", pid)
		require.NoError(t, e.runtime.StopPodSandbox(nriCtx(t), &api.StopPodSandboxRequest{Pod: req}))
		require.NoError(t, e.runtime.RemovePodSandbox(nriCtx(t), &api.RemovePodSandboxRequest{Pod: req}))
	}
	assert.Empty(t, testenv.ReadCalls(t, e.record), "no CNI call")
	assert.Empty(t, e.ipamFiles())
	_, err := e.mgr.Record(p.id)
	assert.ErrorIs(t, err, state.ErrNotFound, "no record")
	assert.Equal(t, hostLinks, linkNames(t), "host links untouched")

	// The pod's real pid (its own netns) with the host bind as pinned path:
	// they disagree, so it is refused.
	odd := p.nri(p.pid, true)
	odd.Linux.Namespaces[0].Path = hostBind
	err = e.runtime.RunPodSandbox(nriCtx(t), &api.RunPodSandboxRequest{Pod: odd})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pid and pinned path name different network namespaces")
	assert.Empty(t, testenv.ReadCalls(t, e.record), "no CNI call")
}

func TestStateDirFullOrUnwritable(t *testing.T) {
	e := newEnv(t, envOpts{})
	// A full disk: the state dir on a tiny tmpfs, filled up.
	require.NoError(t, unix.Mount("tmpfs", e.cfg.StateDir, "tmpfs", 0, "size=64k,mode=0700"))
	t.Cleanup(func() { _ = unix.Unmount(e.cfg.StateDir, unix.MNT_DETACH) })
	filler, err := os.Create(filepath.Join(e.cfg.StateDir, ".filler"))
	require.NoError(t, err)
	_, _ = filler.Write(make([]byte, 128<<10)) // ENOSPC part-way: the fs is full
	filler.Close()

	p := e.newPod()
	err = e.run(p, p.pid)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no space left on device")
	assert.Contains(t, err.Error(), p.id[:12])
	assert.Empty(t, testenv.ReadCalls(t, e.record), "nothing was attached without a record")
	assert.Empty(t, e.ipamFiles())
	require.NoError(t, e.stop(p))
	require.NoError(t, e.remove(p))

	// Unwritable: the state dir replaced by a file.
	require.NoError(t, unix.Unmount(e.cfg.StateDir, unix.MNT_DETACH))
	require.NoError(t, os.RemoveAll(e.cfg.StateDir))
	require.NoError(t, os.WriteFile(e.cfg.StateDir, nil, 0o600))
	q := e.newPod()
	err = e.run(q, q.pid)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a directory")
	assert.Empty(t, e.ipamFiles())
}

func TestPluginBinaryVanishesAfterLoad(t *testing.T) {
	// A private copy of the recorder, deleted once the config is loaded.
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(recorderDir, "cni-recorder"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cni-recorder"), data, 0o755))
	e := newEnv(t, envOpts{recorderBinDir: dir})
	require.NoError(t, os.Remove(filepath.Join(dir, "cni-recorder")))

	p := e.newPod()
	err = e.run(p, p.pid)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cni-recorder")
	assert.Empty(t, e.ipamFiles(), "the bridge's ADD was rolled back")
	assert.Equal(t, 0, e.bridgePorts())
	_, err = e.mgr.Record(p.id)
	assert.ErrorIs(t, err, state.ErrNotFound)
}
