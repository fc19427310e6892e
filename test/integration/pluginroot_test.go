package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// hostRoot stands for the host's / as the DaemonSet mounts it at /host
// (harness.MountNodeRoot: this machine's system dirs, a /run of its own),
// with the reference plugins at /opt/cni/bin and the test's work dir (the
// dhcp daemon's socket, host-local's dataDir) at its path. The pods' pinned
// netns are bound in one by one (what HostToContainer propagation does on a
// node). Unmounted whole at cleanup.
type hostRoot struct {
	t   *testing.T
	dir string
}

func newHostRoot(t *testing.T, work, cniDir string) *hostRoot {
	t.Helper()
	dir := filepath.Join(os.TempDir(), testenv.UniqueName("nchr"))
	require.NoError(t, os.Mkdir(dir, 0o755))
	// Only ever rmdir'ed, never removed recursively.
	t.Cleanup(func() { _ = os.Remove(dir) })
	undo, err := harness.MountNodeRoot(dir, false,
		harness.RootBind{Source: cniDir, Path: "/opt/cni/bin", ReadOnly: true},
		harness.RootBind{Source: work, Path: work})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := undo(); err != nil {
			t.Errorf("unmounting the test's host root %s: %v", dir, err)
		}
	})
	return &hostRoot{t: t, dir: dir}
}

// pinNetns shows a pinned netns at its host path under the root until the
// pod's netns is removed (this cleanup runs before the netns's own).
func (r *hostRoot) pinNetns(pin string) {
	r.t.Helper()
	real, err := filepath.EvalSymlinks(pin) // /var/run/netns/x -> /run/netns/x, as inside
	require.NoError(r.t, err)
	require.NoError(r.t, harness.BindInRoot(r.dir, harness.RootBind{Source: pin, Path: real}))
	target := filepath.Join(r.dir, real)
	r.t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
}

// TestPluginRootRunsReferencePluginsAgainstTheHost: nri-cni (the engine
// behind a real NRI socket) with pluginRoot set to a root whose
// /opt/cni/bin holds the reference plugins, as the DaemonSet's /host does,
// runs the plugins that need the host: bridge with ipMasq (the masquerade
// rule while attached, none after DEL), portmap (the pod's port reached
// through a host port on an address the test owns, the bridge's gateway)
// and the dhcp IPAM with its daemon (the dhcp plugin in the root talks to
// the daemon on the host through its socket) against udhcpd. binDirs and
// CNI_PATH are paths inside the root.
func TestPluginRootRunsReferencePluginsAgainstTheHost(t *testing.T) {
	testenv.RequireRoot(t)
	cniDir := testenv.CNIPluginsDir(t)
	for _, p := range []string{"bridge", "host-local", "portmap", "dhcp"} {
		require.FileExists(t, filepath.Join(cniDir, p), "the reference plugins (test/tools/install.sh cni)")
	}
	testenv.RestoreHostNet(t)
	work, err := os.MkdirTemp("", "ncpr") // short: it holds a socket
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })
	hr := newHostRoot(t, work, cniDir)

	subnet := func() string { return fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(50), rand.IntN(256)) }
	masqBr, pmBr, dhBr := testenv.UniqueName("ncrm"), testenv.UniqueName("ncrp"), testenv.UniqueName("ncrd")
	for _, b := range []string{masqBr, pmBr} { // the bridge plugin creates these
		t.Cleanup(func() { testenv.DeleteLink(b) })
	}
	masqNet, pmNet, dhNet := testenv.UniqueName("masq"), testenv.UniqueName("pm"), testenv.UniqueName("dh")
	masqSubnet, pmSubnet := subnet(), subnet()
	_, pmIPNet, _ := net.ParseCIDR(pmSubnet)
	_, masqIPNet, _ := net.ParseCIDR(masqSubnet)
	dhcp := testenv.StartDHCPServer(t, dhBr, subnet())
	socket := filepath.Join(work, "dhcp.sock")

	confDir := filepath.Join(work, "net.d")
	require.NoError(t, os.MkdirAll(confDir, 0o755))
	ipam := func(s string) map[string]any {
		return map[string]any{"type": "host-local", "subnet": s, "dataDir": filepath.Join(work, "ipam")}
	}
	for name, plugins := range map[string][]any{
		masqNet: {map[string]any{"type": "bridge", "bridge": masqBr, "isGateway": true, "ipMasq": true, "ipam": ipam(masqSubnet)}},
		pmNet: {map[string]any{"type": "bridge", "bridge": pmBr, "isGateway": true, "ipam": ipam(pmSubnet)},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}}},
		// No router asked for: the pod's default route is not the DHCP
		// network's business.
		dhNet: {map[string]any{"type": "bridge", "bridge": dhBr, "ipam": map[string]any{"type": "dhcp",
			"daemonSocketPath": socket, "request": []map[string]any{{"skipDefault": true, "option": "1"}}}}},
	} {
		testenv.WriteJSON(t, filepath.Join(confDir, name+".conflist"), map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": plugins})
	}

	e := &env{t: t, root: work, netName: masqNet}
	e.cfg = config.Default()
	e.cfg.ConfDir, e.cfg.BinDirs, e.cfg.PluginRoot = confDir, []string{"/opt/cni/bin"}, hr.dir
	e.cfg.CacheDir, e.cfg.StateDir = filepath.Join(work, "cache"), filepath.Join(work, "state")
	e.cfg.Networks = []string{masqNet, pmNet, dhNet}
	e.cfg.PodCapabilities = []string{config.CapabilityPortMappings}
	// As deploy/base: the attach runs past RunPodSandbox's 2 s (DHCP),
	// bounded by cniTimeout.
	e.cfg.BackgroundAttach = true
	e.cfg.CNITimeout = config.Duration(20 * time.Second)
	e.startRuntime()
	e.startPlugin()

	p := e.newPod()
	hr.pinNetns(p.netns.Path())
	// Started after the pod: its lease on the pod's netns is gone (cleanup)
	// before the netns is removed.
	daemonLog := testenv.StartDHCPDaemon(t, cniDir, socket)
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(daemonLog)
			t.Logf("dhcp daemon's log:\n%s\nnat table:\n%s", data, strings.Join(testenv.IPTablesRules("iptables", "nat"), "\n"))
		}
		if !stopped { // the pod's DEL while nri-cni, the root and the netns are there
			assert.NoError(t, e.stop(p))
		}
	})
	gw := append(net.IP(nil), pmIPNet.IP.To4()...)
	gw[3] = 1 // host-local's gateway: the bridge's address (isGateway)
	hostPort := freeTCPPort(t)
	sb := p.nri(p.pid, true)
	sb.Annotations = map[string]string{"nri-cni.io/port-mappings": fmt.Sprintf(`[{"hostPort":%d,"containerPort":8080,"protocol":"tcp","hostIP":%q}]`, hostPort, gw)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, e.runtime.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: sb}))
	var rec *state.Record
	testenv.Eventually(t, 30*time.Second, "the pod's three networks attached", func() bool {
		rec, _ = e.mgr.Record(p.id)
		return rec != nil && rec.Phase == state.PhaseAttached
	})
	require.Len(t, rec.Networks, 3)
	t.Logf("attached in %s (bridge+ipMasq, bridge+portmap, bridge+dhcp, every plugin chrooted)", time.Since(start).Round(time.Millisecond))

	addr := func(ifname string) net.IP {
		itf, ok, err := harness.PodIface(p.netns.Path(), ifname)
		require.NoError(t, err)
		require.True(t, ok, "%s in the pod", ifname)
		require.Len(t, itf.Addrs, 1, ifname)
		return itf.Addrs[0].IP
	}
	masqIP, pmIP, dhIP := addr("net1"), addr("net2"), addr("net3")
	assert.True(t, masqIPNet.Contains(masqIP), "net1 %s in %s", masqIP, masqSubnet)
	assert.True(t, pmIPNet.Contains(pmIP), "net2 %s in %s", pmIP, pmSubnet)
	assert.True(t, dhcp.Contains(dhIP), "net3 %s from udhcpd (%s-%s)", dhIP, dhcp.First, dhcp.Last)
	ipamFiles, _ := filepath.Glob(filepath.Join(work, "ipam", "*", "10.*"))
	assert.Len(t, ipamFiles, 2, "host-local wrote its dataDir (inside the root, the same dir)")

	// bridge ipMasq: its chain and the POSTROUTING rule for the pod.
	masqRule := func() string {
		for _, l := range testenv.IPTablesRules("iptables", "nat") {
			if strings.HasPrefix(l, "-A POSTROUTING -s "+masqIP.String()+"/32 ") && strings.Contains(l, p.id) {
				return l
			}
		}
		return ""
	}
	rule := masqRule()
	require.NotEmpty(t, rule, "bridge's masquerade rule for %s (iptables found inside the root)", masqIP)
	masqChain := rule[strings.LastIndex(rule, " ")+1:]
	assert.True(t, strings.HasPrefix(masqChain, "CNI-"), rule)
	assert.Contains(t, testenv.IPTablesRules("iptables", "nat"), "-N "+masqChain)

	// portmap: the pod's 8080 through the host port on the gateway.
	testenv.ServeTCP(t, p.netns.Path(), 8080, "hello from "+p.id)
	got, err := testenv.ReadGreeting(net.JoinHostPort(gw.String(), fmt.Sprint(hostPort)))
	require.NoError(t, err, "the host port %d on %s (portmap's DNAT)", hostPort, gw)
	assert.Equal(t, "hello from "+p.id, got)
	dnatChains := func() []string {
		var out []string
		for _, l := range testenv.IPTablesRules("iptables", "nat") {
			if name, ok := strings.CutPrefix(l, "-N CNI-DN-"); ok {
				out = append(out, name)
			}
		}
		return out
	}
	assert.Len(t, dnatChains(), 1, "portmap's chain for the pod")

	// Stop: DEL of the three (the netns still there).
	stopped = true
	start = time.Now()
	require.NoError(t, e.stop(p))
	t.Logf("StopPodSandbox (DEL of the three) took %s", time.Since(start).Round(time.Millisecond))
	// Under load the DELs may outlast the request's 2 s: they go on in the
	// held namespace after the answer.
	e.waitTornDown(p)
	t.Logf("teardown ended %s after the Stop", time.Since(start).Round(time.Millisecond))
	for _, ifname := range []string{"net1", "net2", "net3"} {
		_, ok, err := harness.PodIface(p.netns.Path(), ifname)
		require.NoError(t, err)
		assert.False(t, ok, "%s is gone", ifname)
	}
	assert.Empty(t, masqRule(), "the masquerade rule is gone")
	assert.NotContains(t, testenv.IPTablesRules("iptables", "nat"), "-N "+masqChain, "and its chain")
	assert.Empty(t, dnatChains(), "portmap's chain is gone")
	_, err = testenv.ReadGreeting(net.JoinHostPort(gw.String(), fmt.Sprint(hostPort)))
	assert.Error(t, err, "the host port leads nowhere any more")
	ipamFiles, _ = filepath.Glob(filepath.Join(work, "ipam", "*", "10.*"))
	assert.Empty(t, ipamFiles, "host-local released")
	require.NoError(t, e.remove(p))
	assert.Equal(t, 0, e.cacheEntries(p.id))
}

// freeTCPPort is a TCP port free right now on this machine.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
