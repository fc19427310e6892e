package nri

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
)

// hookPlugin is backgroundPlugin with the await hook on, served on a socket
// of its own.
func hookPlugin(t *testing.T, sleep string, fail bool) (*attachtest.Fixture, *Plugin, string) {
	t.Helper()
	f, p := backgroundPlugin(t, sleep, fail)
	dir, err := os.MkdirTemp("", "await") // short: unix socket paths
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "await.sock")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, p.ServeAwait(ctx, socket))
	p.Hook = Hook{Path: "/opt/nri-cni/bin/nri-cni", Socket: socket, Timeout: 30 * time.Second}
	st, err := os.Stat(socket)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "root only")
	return f, p, socket
}

// ask sends one hook request and returns the answer line.
func ask(t *testing.T, socket, request string) string {
	t.Helper()
	c, err := net.Dial("unix", socket)
	require.NoError(t, err)
	defer c.Close()
	_, err = fmt.Fprint(c, request)
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(line)
}

// With the hook on, CreateContainer never waits for a background attach:
// it answers at once with the await hook, which returns once the pod is
// attached. A pod attached already gets no hook.
func TestCreateContainerHandsTheWaitToTheAwaitHook(t *testing.T) {
	f, p, socket := hookPlugin(t, "400ms", false)
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod))

	start := time.Now()
	adj, _, err := p.CreateContainer(context.Background(), pod, nriCtr("app", "sb1"))
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 200*time.Millisecond, "no wait inside NRI")
	require.NotNil(t, adj, "the await hook")
	hooks := adj.GetHooks().GetCreateRuntime()
	require.Len(t, hooks, 1)
	assert.Equal(t, "/opt/nri-cni/bin/nri-cni", hooks[0].Path)
	assert.Equal(t, []string{"nri-cni", "await", "--socket", socket, "--sandbox", "sb1", "--timeout", "30s"}, hooks[0].Args)
	assert.Equal(t, int64(45), hooks[0].Timeout.GetValue(), "the runtime's backstop after the hook's own timeout")

	assert.Equal(t, "ok", ask(t, socket, "await sb1 10000\n"), "the hook returns once attached")
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAttached, rec.Phase)

	adj, _, err = p.CreateContainer(context.Background(), pod, nriCtr("sidecar", "sb1"))
	require.NoError(t, err)
	assert.Nil(t, adj, "attached already: no hook")
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds(), "one ADD")
}

// A failed background attach fails the hook with its error (the
// container's start fails; the kubelet retries).
func TestAwaitHookReportsAFailedAttach(t *testing.T) {
	f, p, socket := hookPlugin(t, "200ms", true)
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod))
	adj, _, err := p.CreateContainer(context.Background(), pod, nriCtr("app", "sb1"))
	require.NoError(t, err)
	require.NotNil(t, adj)
	got := ask(t, socket, "await sb1 10000\n")
	assert.True(t, strings.HasPrefix(got, "error "), got)
	assert.Contains(t, got, "no leases")
}

// A restarted nri-cni knows nothing of the hook's pod: it waits for the
// record its resync writes, and gives up at the request's timeout.
func TestAwaitHookAfterARestartWaitsForTheRecord(t *testing.T) {
	f, _, socket := hookPlugin(t, "", false)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := f.Mgr.AttachIfAbsent(context.Background(), attachtestSandbox(f, "sb2"))
		assert.NoError(t, err)
	}()
	assert.Equal(t, "ok", ask(t, socket, "await sb2 10000\n"), "attached by the resync")
	got := ask(t, socket, "await sb3 300\n")
	assert.True(t, strings.HasPrefix(got, "error "), got)
	assert.Contains(t, got, "not attached yet")
}

// Tenant-free input, still bounded: a bad request is refused, never waited on.
func TestAwaitHookRefusesBadRequests(t *testing.T) {
	_, _, socket := hookPlugin(t, "", false)
	for _, req := range []string{"wait sb1 100\n", "await ../x 100\n", "await sb1 -5\n", "await sb1 999999999\n",
		"await sb1\n", strings.Repeat("a", 300) + "\n"} {
		got := ask(t, socket, req)
		assert.True(t, strings.HasPrefix(got, "error "), "%q → %q", req, got)
	}
}

// attachtestSandbox is the sandbox runningPod makes, for the engine.
func attachtestSandbox(f *attachtest.Fixture, id string) attach.Sandbox {
	sb, _ := sandboxOf(runningPod(f, id, 10))
	return sb
}

// Only an attach RunPodSandbox started and that still runs goes to the
// hook. A pod nri-cni has to start attaching itself (created while it was
// away, or a retry after a failure) is attached inside the call, as
// without the hook: a failure is then the container's CreateContainerError
// (retried by the kubelet without a restart counted), not a failed start.
func TestCreateContainerAttachesInTheCallWhatItStarts(t *testing.T) {
	f, p, _ := hookPlugin(t, "", true)
	pod := runningPod(f, "away", 10) // no RunPodSandbox: created while nri-cni was away
	adj, _, err := p.CreateContainer(attachtest.WithDeadline(t, 2*time.Second), pod, nriCtr("app", "away"))
	require.Error(t, err, "the attach's failure, at CreateContainer")
	assert.Contains(t, err.Error(), "no leases")
	assert.Nil(t, adj, "no hook")
}

// A background attach that ends without attaching anything (a host-network
// pod: CRI-O pins a bind of the host's namespace for it) lets the hook go.
func TestAwaitHookEndsWhenTheAttachEndsWithNothing(t *testing.T) {
	f, p, socket := hookPlugin(t, "", false)
	pod := runningPod(f, "sb1", 10)
	sb, _ := sandboxOf(pod)
	p.awaits.put(sb, false)
	f.Netns.Mu.Lock()
	f.Netns.ResolveErr = fmt.Errorf("pid 10 and /pinned/sb1: %w", netns.ErrHostNetwork)
	f.Netns.Mu.Unlock()
	require.True(t, f.Mgr.Background().Start(sb))
	assert.Equal(t, "ok", ask(t, socket, "await sb1 10000\n"))
}

// A hook the runtime could not run (its binary missing or not executable on
// the node) is never handed out: the container would fail to start. The
// container waits for its pod's attach inside CreateContainer instead, as
// with the hook off, and is created once the pod is attached.
func TestCreateContainerHandsOutNoHookThatCannotRun(t *testing.T) {
	f, p, _ := hookPlugin(t, "200ms", false)
	p.Hook.Runnable = func() error { return errors.New("/opt/nri-cni/bin/nri-cni: no such file or directory") }
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod))
	adj, _, err := p.CreateContainer(attachtest.WithDeadline(t, 5*time.Second), pod, nriCtr("app", "sb1"))
	require.NoError(t, err)
	assert.Nil(t, adj, "no await hook")
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAttached, rec.Phase, "attached before the container is created")
}
