package harness_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestCRIO proves the CRI-O harness: a private CRI-O 1.36 in both pid modes
// runs a pod through CRI with nri-cni connected as an external NRI plugin
// (net1 attached, the address released at Stop), and Close leaves nothing
// behind. An observer plugin records what CRI-O sends.
func TestCRIO(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name      string
		dropInfra bool
	}{
		{"infra-kept", false},
		{"infra-dropped", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			w := newCRIOWorld(ctx, t, tc.dropInfra, "")
			runCRIOPod(ctx, t, w)
		})
	}
}

// crioWorld is a private CRI-O with nri-cni (external) and an observer.
type crioWorld struct {
	c         *harness.CRIO
	cri       *harness.CRI
	cfg       harness.PluginConfig
	cfgPath   string
	bin       string
	secondary harness.Secondary
	plugin    *harness.Plugin
	obs       *harness.Observer
}

// newCRIOWorld starts it all, cleaned up (and checked for leftovers) at the
// end of the test.
func newCRIOWorld(ctx context.Context, t *testing.T, dropInfra bool, failurePolicy string) *crioWorld {
	tools, err := harness.EnsureContainerdTools()
	require.NoError(t, err)
	crioBin, err := harness.EnsureCRIO(ctx)
	require.NoError(t, err)
	// A short dir: CRI-O's sockets live in it.
	dir, err := os.MkdirTemp("", "crio")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	w := &crioWorld{secondary: harness.NewSecondary(filepath.Join(dir, "p"))}
	w.bin, err = harness.GoBuild(dir, "./cmd/nri-cni", "nri-cni")
	require.NoError(t, err)

	start := time.Now()
	w.c, err = harness.StartCRIO(ctx, harness.CRIOOpts{Dir: filepath.Join(dir, "c"), Tools: tools,
		CRIOBinDir: crioBin, DropInfra: dropInfra})
	require.NoError(t, err)
	t.Logf("CRI-O started in %s (drop_infra_ctr=%t, pause image built and loaded)", time.Since(start).Round(time.Millisecond), dropInfra)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("crio log tail:\n%s", w.c.LogTail(40))
		}
		assert.NoError(t, w.c.Close(context.Background()))
		assert.Empty(t, w.c.Leftovers(), "left behind by CRI-O after Close")
		w.secondary.DeleteBridge()
	})

	w.cfg, err = harness.NewPluginConfig(filepath.Join(dir, "p"), tools, w.secondary)
	require.NoError(t, err)
	w.cfg.FailurePolicy = failurePolicy
	w.cfgPath = filepath.Join(dir, "p", "nri.conf")
	require.NoError(t, w.cfg.Write(w.cfgPath))
	w.plugin, err = harness.StartPlugin(ctx, w.c, w.bin, w.cfgPath, w.cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, w.plugin.Stop())
		if t.Failed() {
			t.Logf("nri-cni log:\n%s", w.cfg.Log())
		}
	})
	w.obs = startObserver(ctx, t, w.c)

	w.cri, err = harness.DialCRI(ctx, w.c.Address)
	require.NoError(t, err)
	t.Cleanup(func() { w.cri.Close() })
	return w
}

func startObserver(ctx context.Context, t *testing.T, c *harness.CRIO) *harness.Observer {
	synced := c.CountLog(c.PluginSynced("90-observer"))
	obs, err := harness.StartObserver(ctx, c.NRISocket, "observer", "90")
	require.NoError(t, err)
	t.Cleanup(obs.Stop)
	require.NoError(t, c.WaitLog(ctx, c.PluginSynced("90-observer"), synced+1, 15*time.Second))
	return obs
}

// runPod runs a pod the way the kubelet asks for one: its own pid namespace
// per container (CONTAINER). With the harness default (POD, a shared pid
// namespace) CRI-O always keeps the infra container, whatever
// drop_infra_ctr says.
func (w *crioWorld) runPod(ctx context.Context, spec harness.PodSpec) (string, error) {
	cfg := w.cri.SandboxConfig(spec)
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_CONTAINER
	resp, err := w.cri.Runtime().RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", err
	}
	return resp.PodSandboxId, nil
}

func runCRIOPod(ctx context.Context, t *testing.T, w *crioWorld) {
	c, cri, secondary, cfg, obs, dropInfra := w.c, w.cri, w.secondary, w.cfg, w.obs, w.c.DropInfra
	start := time.Now()
	id, err := w.runPod(ctx, harness.PodSpec{Name: "probe", Namespace: "default", UID: harness.RandomName("uid-")})
	require.NoError(t, err)
	runTook := time.Since(start)
	ps, err := cri.PodStatus(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "SANDBOX_READY", ps.State)
	if dropInfra {
		assert.Zero(t, ps.Pid, "no infra process when it is dropped")
	} else {
		assert.Positive(t, ps.Pid, "the infra (pause) process")
	}
	_, primary, _ := net.ParseCIDR(c.PrimarySubnet)
	assert.True(t, primary.Contains(net.ParseIP(ps.IP)), "eth0 %q in CRI-O's primary %s", ps.IP, c.PrimarySubnet)

	iface, ok, err := harness.PodIface(ps.NetnsPath, "net1")
	require.NoError(t, err)
	require.True(t, ok, "net1 in %s", ps.NetnsPath)
	_, sub, _ := net.ParseCIDR(secondary.Subnet)
	require.Len(t, iface.Addrs, 1)
	assert.True(t, sub.Contains(iface.Addrs[0].IP), "net1 %s in %s", iface.Addrs[0].IP, secondary.Subnet)
	assert.Len(t, secondary.IPFiles(), 1)

	for _, l := range c.Leftovers() {
		t.Logf("live: %s", l)
	}

	start = time.Now()
	// Right after Run: the pause image's SIGKILL stop signal keeps this
	// from waiting for the deadline (see CRIOOpts.PauseStopSignal).
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, cri.StopPod(stopCtx, id))
	stopTook := time.Since(start)
	assert.Empty(t, secondary.IPFiles(), "the secondary address is released at Stop")
	start = time.Now()
	require.NoError(t, cri.RemovePod(ctx, id))
	removeTook := time.Since(start)
	assert.Empty(t, secondary.IPFiles())
	assert.Empty(t, cfg.StateFiles(), "nri-cni's record is gone after Remove")
	t.Logf("pod Run %s, Stop %s, Remove %s", runTook.Round(time.Millisecond), stopTook.Round(time.Millisecond),
		removeTook.Round(time.Millisecond))

	// What CRI-O sent: the pid per mode, the netns at each event.
	events := obs.Of(id)
	var names []string
	for _, e := range events {
		names = append(names, e.Event)
		t.Logf("NRI %s: pid %d netns %q exists %t namespaces %v", e.Event, e.Pid, e.Namespaces["network"], e.NetnsExists, e.Namespaces)
	}
	assert.Equal(t, []string{"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox"}, names)
	if assert.NotEmpty(t, events) {
		if dropInfra {
			assert.Zero(t, events[0].Pid, "drop_infra_ctr: NRI Pid 0")
		} else {
			assert.EqualValues(t, ps.Pid, events[0].Pid, "infra kept: NRI gets the pause pid")
		}
	}
}

// TestCRIORestart restarts CRI-O under a live pod: the pod stays ready with
// its net1, nri-cni reconnects and is synchronized again, and Stop/Remove
// after the restart still reach it and release the address. It also logs
// what CRI-O sends for a host-network pod (nri-cni with failurePolicy
// ignore, so the pod starts whatever nri-cni decides).
func TestCRIORestart(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name      string
		dropInfra bool
	}{
		{"infra-kept", false},
		{"infra-dropped", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			restartCRIO(ctx, t, newCRIOWorld(ctx, t, tc.dropInfra, "ignore"))
		})
	}
}

func restartCRIO(ctx context.Context, t *testing.T, w *crioWorld) {
	c := w.c
	id, err := w.runPod(ctx, harness.PodSpec{Name: "live", Namespace: "default", UID: harness.RandomName("uid-")})
	require.NoError(t, err)
	ps, err := w.cri.PodStatus(ctx, id)
	require.NoError(t, err)

	synced := c.CountLog(c.PluginSynced("10-nri-cni"))
	start := time.Now()
	require.NoError(t, c.Restart(ctx))
	t.Logf("CRI-O restart (SIGTERM to CRI answering) %s", time.Since(start).Round(time.Millisecond))
	require.NoError(t, c.WaitLog(ctx, c.PluginSynced("10-nri-cni"), synced+1, 60*time.Second),
		"nri-cni reconnects after the restart")
	t.Logf("nri-cni synchronized again %s after the restart began", time.Since(start).Round(time.Millisecond))
	obs := startObserver(ctx, t, c)
	for _, e := range obs.Of(id) {
		t.Logf("after restart NRI %s: pid %d netns exists %t", e.Event, e.Pid, e.NetnsExists)
	}

	cri, err := harness.DialCRI(ctx, c.Address)
	require.NoError(t, err)
	defer cri.Close()
	after, err := cri.PodStatus(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "SANDBOX_READY", after.State, "the pod survives a CRI-O restart")
	assert.Equal(t, ps.NetnsPath, after.NetnsPath)
	_, ok, err := harness.PodIface(after.NetnsPath, "net1")
	require.NoError(t, err)
	assert.True(t, ok, "net1 survives a CRI-O restart")

	require.NoError(t, cri.StopPod(ctx, id))
	assert.Empty(t, w.secondary.IPFiles(), "Stop after a restart releases the address")
	require.NoError(t, cri.RemovePod(ctx, id))
	var names []string
	for _, e := range obs.Of(id) {
		names = append(names, e.Event)
	}
	t.Logf("events after the restart for the live pod: %v", names)
	assert.Contains(t, names, "StopPodSandbox", "CRI-O sends Stop for a pod created before its restart")

	hid, err := w.runPod(ctx, harness.PodSpec{Name: "hostnet", Namespace: "default", UID: harness.RandomName("uid-"),
		HostNetwork: true})
	require.NoError(t, err, "host-network pod with failurePolicy ignore")
	hostRun := obs.Of(hid)
	require.NotEmpty(t, hostRun)
	e := hostRun[0]
	t.Logf("host-network pod NRI %s: pid %d netns %q exists %t is-host %t namespaces %v", e.Event, e.Pid,
		e.Namespaces["network"], e.NetnsExists, e.NetnsIsHost, e.Namespaces)
	assert.True(t, e.NetnsIsHost, "CRI-O passes a pinned bind of the host netns for a host-network pod")
	require.NoError(t, cri.StopPod(ctx, hid))
	require.NoError(t, cri.RemovePod(ctx, hid))
	for _, l := range strings.Split(w.cfg.Log(), "\n") {
		if strings.Contains(l, "pod=hostnet") {
			t.Logf("nri-cni: %s", l)
		}
	}
	for _, e := range obs.Of(hid)[1:] {
		t.Logf("host-network pod NRI %s: pid %d netns %q exists %t", e.Event, e.Pid, e.Namespaces["network"], e.NetnsExists)
	}
}
