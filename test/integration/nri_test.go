package integration

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestPodLifecycleOverNRI(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := e.newPod()

	require.NoError(t, e.run(p, p.pid))
	addrs := podAddrs(t, p)
	require.Len(t, addrs, 1, "net1 has one IPv4 address")
	assert.True(t, e.subnet.Contains(addrs[0]), "%s in %s", addrs[0], e.subnet)
	assert.Equal(t, []string{addrs[0].String()}, e.ipamFiles())

	calls := testenv.ReadCalls(t, e.record)
	require.Len(t, calls, 1)
	assert.Equal(t, "ADD", calls[0].Cmd)
	assert.Equal(t, p.id, calls[0].ContainerID)
	assert.Equal(t, p.netns.Path(), calls[0].Netns, "CNI_NETNS is the pinned path")
	assert.Equal(t, "net1", calls[0].IfName)
	assert.Equal(t, "IgnoreUnknown=1;K8S_POD_NAMESPACE=it;K8S_POD_NAME=pod-"+p.id+
		";K8S_POD_INFRA_CONTAINER_ID="+p.id+";K8S_POD_UID=uid-"+p.id, calls[0].Args)
	rec, err := e.mgr.Record(p.id)
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAttached, rec.Phase)
	assert.Equal(t, []string{addrs[0].String() + "/24"}, rec.Networks[0].IPs)

	// Stop (containerd: pid 0, pinned netns still there): DEL in the netns.
	require.NoError(t, e.stop(p))
	assert.Nil(t, podAddrs(t, p), "net1 is gone")
	assert.Empty(t, e.ipamFiles(), "host-local released the IP")
	assert.Equal(t, 0, e.bridgePorts(), "the veth is gone")
	calls = testenv.ReadCalls(t, e.record)
	require.Len(t, calls, 2)
	assert.Equal(t, "DEL", calls[1].Cmd)
	assert.NotEmpty(t, calls[1].Netns, "DEL ran with the netns, not the empty fallback")
	assert.NotZero(t, calls[1].NetnsIno)
	assert.Equal(t, calls[0].NetnsIno, calls[1].NetnsIno, "DEL ran in the pod's namespace (%s; Stop holds it open)", calls[1].Netns)

	require.NoError(t, e.remove(p))
	_, err = e.mgr.Record(p.id)
	assert.ErrorIs(t, err, state.ErrNotFound)
	assert.Equal(t, 0, e.cacheEntries(p.id))

	// The netns is deleted; Stop and Remove arrive again: no error.
	testenv.DeleteNetNS(t, p.netns)
	require.NoError(t, e.stop(p))
	require.NoError(t, e.remove(p))
}

func TestRemoveAfterNetnsDeletedReleasesIP(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := e.newPod()
	require.NoError(t, e.run(p, p.pid))
	require.Len(t, e.ipamFiles(), 1)

	// The netns vanishes before any Stop (CRI-O ordering, or a crash).
	testenv.DeleteNetNS(t, p.netns)
	require.NoError(t, e.stop(p))
	require.NoError(t, e.remove(p))
	assert.Empty(t, e.ipamFiles(), "the empty-netns DEL still releases the IP")
	assert.Equal(t, 0, e.cacheEntries(p.id))
	calls := testenv.ReadCalls(t, e.record)
	require.Len(t, calls, 2)
	assert.Equal(t, "", calls[1].Netns)
}

func TestFailingChainLeavesNothing(t *testing.T) {
	e := newEnv(t, envOpts{recorder: map[string]any{"failOn": "ADD", "failMsg": "quota exceeded"}})
	p := e.newPod()

	err := e.run(p, p.pid)
	require.Error(t, err)
	assert.Contains(t, err.Error(), e.netName, "names the network")
	assert.Contains(t, err.Error(), "quota exceeded", "carries the plugin's message")
	assert.Contains(t, err.Error(), "it/pod-"+p.id, "names the pod")

	assert.Nil(t, podAddrs(t, p))
	assert.Empty(t, e.ipamFiles(), "no IP file")
	assert.Equal(t, 0, e.bridgePorts(), "no veth")
	assert.Equal(t, 0, e.cacheEntries(p.id), "no cache entry")
	_, err = e.mgr.Record(p.id)
	assert.ErrorIs(t, err, state.ErrNotFound, "no record")
	// containerd follows a failed Run with Stop and Remove: both fine.
	require.NoError(t, e.stop(p))
	require.NoError(t, e.remove(p))
}

func TestPidInHostNetnsIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := e.newPod()
	hostLinks := linkNames(t)

	// PID reuse: the pod's pid now belongs to a host process (us).
	err := e.run(p, os.Getpid())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "host network namespace")
	assert.Empty(t, testenv.ReadCalls(t, e.record), "no CNI call at all")
	assert.Empty(t, e.ipamFiles())
	assert.Equal(t, hostLinks, linkNames(t), "host links untouched")
	_, err = e.mgr.Record(p.id)
	assert.True(t, errors.Is(err, state.ErrNotFound))
}

func TestPinnedPathMismatchIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := e.newPod()
	other := e.newPod()
	// The pid lives in another pod's netns than the pinned path names.
	err := e.run(p, other.pid)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "different network namespaces")
	assert.Empty(t, testenv.ReadCalls(t, e.record))
}

func linkNames(t *testing.T) string {
	links, err := netlink.LinkList()
	require.NoError(t, err)
	var names []string
	for _, l := range links {
		// Other tests running in parallel may add their own bridges/veths.
		if n := l.Attrs().Name; !strings.HasPrefix(n, "nctb") && !strings.HasPrefix(n, "veth") {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

func TestPrelaunchedDropIn(t *testing.T) {
	e := newEnv(t, envOpts{prelaunch: true})
	p := e.newPod()
	require.NoError(t, e.run(p, p.pid))
	addrs := podAddrs(t, p)
	require.Len(t, addrs, 1)
	assert.True(t, e.subnet.Contains(addrs[0]))
	require.NoError(t, e.stop(p))
	require.NoError(t, e.remove(p))
	assert.Empty(t, e.ipamFiles())

	// stdout/stderr are discarded: the plugin logs to its configured file.
	logData, err := os.ReadFile(e.cfg.LogFile)
	require.NoError(t, err)
	assert.Contains(t, string(logData), "nri-cni starting (pre-launched)", "early lines reach the configured file")
	assert.Contains(t, string(logData), "configured by the runtime")
	assert.Contains(t, string(logData), "network attached")
	assert.Contains(t, string(logData), p.id)
}

func TestExternalBinaryReconnectsAndStopsOnSIGTERM(t *testing.T) {
	e := newEnv(t, envOpts{external: true})
	p := e.newPod()
	require.NoError(t, e.run(p, p.pid))
	require.Len(t, podAddrs(t, p), 1)

	code, body := httpGet(t, "http://"+e.metricsAddr+"/healthz")
	assert.Equal(t, 200, code, body)
	_, body = httpGet(t, "http://"+e.metricsAddr+"/metrics")
	assert.Contains(t, body, `nri_cni_operations_total{network="`+e.netName+`",op="add",result="ok"} 1`)
	assert.Contains(t, body, "nri_cni_attachments 1")
	assert.Contains(t, body, "nri_cni_runtime_connected 1")

	// The runtime restarts: the plugin reconnects by itself.
	e.restartRuntime()
	require.NoError(t, e.stop(p))
	assert.Empty(t, e.ipamFiles(), "the reconnected plugin handled Stop")
	require.NoError(t, e.remove(p))

	require.NoError(t, e.proc.Process.Signal(syscall.SIGTERM))
	require.NoError(t, e.proc.Wait(), "exits 0 on SIGTERM")
	logData, err := os.ReadFile(e.cfg.LogFile)
	require.NoError(t, err)
	assert.Contains(t, string(logData), "reconnecting")
	assert.Contains(t, string(logData), "nri-cni stopped")
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // loopback, test
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
