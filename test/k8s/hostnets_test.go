package k8s

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestPluginsReachTheHost: deploy/base's DaemonSet runs the CNI plugins
// chrooted into the node's / (mounted at /host, nri.conf pluginRoot), so
// the image's plugins find what they find under the runtime. Three pods,
// each with a NAD of the namespace whose nadPolicy rule allows the host (the
// overlay's HostNetsNamespace): bridge with ipMasq (its masquerade rule
// in the node's iptables while the pod lives, gone after), bridge with
// portmap (the pod's port reached from the node through a host port on
// the bridge's address, the NPWG element's portMappings), and bridge with
// the dhcp IPAM (the node's dhcp daemon, whose socket the plugin reaches in
// the node's root, leasing from udhcpd on the bridge). Before pluginRoot the
// first two failed every pod (`failed to locate iptables`), the third
// found no daemon socket.
func TestPluginsReachTheHost(t *testing.T) {
	f := newFixture(t)
	o := f.w.o
	ns := o.HostNetsNamespace
	require.NotEmpty(t, ns, "the overlay's namespace for NADs that reach the host")
	testenv.RestoreHostNet(t) // portmap's shared chains (the pod's own are asserted gone)
	f.namespace(ns)

	// The node admin's part of a dhcp network: the plugin in the node's
	// bin dir and its daemon running on the node.
	cniDir := testenv.CNIPluginsDir(t)
	dhcpBin := filepath.Join(o.CNIBin, "dhcp")
	data, err := os.ReadFile(filepath.Join(cniDir, "dhcp"))
	require.NoError(t, err, "the dhcp plugin (test/tools/install.sh cni)")
	require.NoError(t, os.WriteFile(dhcpBin, data, 0o755))
	t.Cleanup(func() { _ = os.Remove(dhcpBin) })
	dhBr, dhSubnet := k8sdeploy.NADBridge(), k8sdeploy.NADSubnet()
	dhcp := testenv.StartDHCPServer(t, dhBr, dhSubnet)
	socket := filepath.Join(o.DHCPDir, testenv.UniqueName("d")+".sock")
	daemonLog := testenv.StartDHCPDaemon(t, cniDir, socket)

	masqBr, masqSubnet := k8sdeploy.NADBridge(), k8sdeploy.NADSubnet()
	pmBr, pmSubnet := k8sdeploy.NADBridge(), k8sdeploy.NADSubnet()
	for _, b := range []string{masqBr, pmBr} { // the bridge plugin creates these
		t.Cleanup(func() { _ = deleteLink(b) })
	}
	hostLocal := func(s string) map[string]any {
		return map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": s}}}}
	}
	nad := func(name string, plugins ...any) string {
		data, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "cni-" + name, "plugins": plugins})
		f.createNAD(ns, name, string(data))
		return name
	}
	masq := nad(harness.RandomName("masq-"), map[string]any{"type": "bridge", "bridge": masqBr, "isGateway": true,
		"ipMasq": true, "ipam": hostLocal(masqSubnet)})
	pm := nad(harness.RandomName("pm-"), map[string]any{"type": "bridge", "bridge": pmBr, "isGateway": true,
		"ipam": hostLocal(pmSubnet)}, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
	// No router asked for: the pod's default route stays eth0's.
	dh := nad(harness.RandomName("dh-"), map[string]any{"type": "bridge", "bridge": dhBr, "ipam": map[string]any{
		"type": "dhcp", "daemonSocketPath": socket, "request": []map[string]any{{"skipDefault": true, "option": "1"}}}})
	for _, n := range []string{masq, pm, dh} {
		f.nodeDevices(ns + "/" + n) // the NAD cache has them (the DRA driver published them)
	}

	gw := strings.TrimSuffix(pmSubnet, "0/24") + "1" // the bridge's address (isGateway)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	hostPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	// One network per pod, and a fourth pod with all three: bridge's DEL
	// removes its ipMasq rule only in the pod's netns, and three iptables-
	// and DHCP-bound DELs in one pod take longer than the runtime's NRI
	// request deadline (2 s) on a loaded 2-core machine; nri-cni holds the
	// netns and goes on past the deadline, so no rule is left.
	pods := map[string]string{
		masq: fmt.Sprintf(`[{"name": %q}]`, masq),
		// The NPWG element's portMappings (the portMappings capability,
		// which the overlay's podCapabilities allows): a host port on the
		// node, on the bridge's address.
		pm: fmt.Sprintf(`[{"name": %q, "portMappings": [{"hostPort": %d, "containerPort": 8080, "protocol": "tcp", "hostIP": %q}]}]`,
			pm, hostPort, gw),
		dh: fmt.Sprintf(`[{"name": %q}]`, dh),
	}
	const all = "all"
	pods[all] = fmt.Sprintf(`[{"name": %q}, {"name": %q}, {"name": %q}]`, masq, pm, dh)
	kinds := []string{masq, pm, dh, all}
	names, ids := map[string]string{}, map[string]string{}
	start := time.Now()
	for _, n := range kinds {
		names[n] = harness.RandomName("hostnets-")
		f.create(f.pod(names[n], ns, map[string]string{npwgAnnotation: pods[n]}))
	}
	// Deleted before the daemon stops (the DEL releases the lease through
	// it), each DEL done before RestoreHostNet looks at the chains.
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(daemonLog)
			t.Logf("dhcp daemon's log:\n%s\nnat table:\n%s", log, strings.Join(testenv.IPTablesRules("iptables", "nat"), "\n"))
		}
		for _, n := range kinds {
			_ = f.k.CoreV1().Pods(ns).Delete(f.ctx, names[n], metav1.DeleteOptions{})
		}
		for _, n := range kinds {
			f.waitPodsGone(ns, "metadata.name="+names[n], "")
			if id := ids[n]; id != "" {
				f.waitReleased(id)
				f.waitFor("the pod's iptables rules gone", waitLong, func() (bool, string) {
					left := podRules(id)
					return len(left) == 0, strings.Join(left, "\n")
				})
			}
		}
	})
	ready := map[string]*corev1.Pod{}
	for _, n := range kinds {
		ready[n] = f.waitReady(ns, names[n])
		ids[n], _ = f.readySandbox(ready[n])
	}
	t.Logf("4 pods Ready in %s (bridge+ipMasq, bridge+portmap, bridge+dhcp, all three)", since(start))
	masqIf, pmIf, dhIf := f.iface(ready[masq], "net1"), f.iface(ready[pm], "net1"), f.iface(ready[dh], "net1")
	assert.True(t, (&nadNet{Subnet: masqSubnet}).contains(masqIf.Addrs[0].String()), "%s in %s", masqIf.Addrs[0].String(), masqSubnet)
	assert.True(t, (&nadNet{Subnet: pmSubnet}).contains(pmIf.Addrs[0].String()), "%s in %s", pmIf.Addrs[0].String(), pmSubnet)
	assert.True(t, dhcp.Contains(dhIf.Addrs[0].IP), "%s leased by udhcpd (%s-%s)", dhIf.Addrs[0].IP, dhcp.First, dhcp.Last)
	assert.Len(t, o.IPFilesOf("cni-"+masq, ids[masq]), 1, "host-local's address file where the node keeps them (the private /var/lib/cni)")

	// ipMasq: bridge found iptables in the node's root.
	masqIP := masqIf.Addrs[0].IP.String()
	masqRule := func() string {
		for _, r := range testenv.IPTablesRules("iptables", "nat") {
			if strings.HasPrefix(r, "-A POSTROUTING -s "+masqIP+"/32 ") && strings.Contains(r, ids[masq]) {
				return r
			}
		}
		return ""
	}
	rule := masqRule()
	require.NotEmpty(t, rule, "the masquerade rule of %s in the node's nat table", masqIP)
	masqChain := rule[strings.LastIndex(rule, " ")+1:]

	// portmap: from the node, the host port on the bridge's address.
	_, pmSt := f.readySandbox(ready[pm])
	testenv.ServeTCP(t, pmSt.NetnsPath, 8080, "hello from "+names[pm])
	got, err := testenv.ReadGreeting(net.JoinHostPort(gw, fmt.Sprint(hostPort)))
	require.NoError(t, err, "host port %d on %s (portmap's DNAT in the node's iptables)", hostPort, gw)
	assert.Equal(t, "hello from "+names[pm], got)
	assert.NotEmpty(t, podRules(ids[pm]), "portmap's rules name the pod")

	// The pod with all three: its masquerade rule too.
	allIP := f.iface(ready[all], "net1").Addrs[0].IP.String()
	assert.True(t, (&nadNet{Subnet: pmSubnet}).contains(f.iface(ready[all], "net2").Addrs[0].String()))
	assert.True(t, dhcp.Contains(f.iface(ready[all], "net3").Addrs[0].IP))
	allRules := func() []string {
		var out []string
		for _, r := range testenv.IPTablesRules("iptables", "nat") {
			if strings.HasPrefix(r, "-A POSTROUTING -s "+allIP+"/32 ") {
				out = append(out, r)
			}
		}
		return out
	}
	require.NotEmpty(t, allRules(), "the masquerade rule of the pod with three networks")

	for _, n := range kinds {
		start = time.Now()
		f.deletePod(ns, names[n])
		f.waitReleased(ids[n])
		t.Logf("pod %s deleted and released in %s", names[n], since(start))
		assert.Empty(t, podRules(ids[n]), "no rule of pod %s left", names[n])
	}
	assert.Empty(t, masqRule(), "the masquerade rule is gone with the pod")
	assert.Empty(t, allRules(), "the three-network pod's masquerade rule is gone too (its DELs ran in its netns)")
	assert.NotContains(t, testenv.IPTablesRules("iptables", "nat"), "-N "+masqChain)
	_, err = testenv.ReadGreeting(net.JoinHostPort(gw, fmt.Sprint(hostPort)))
	assert.Error(t, err, "the host port is closed with the pod")
	assert.Empty(t, o.IPFilesOf("cni-"+masq, ids[masq]))
	log, err := os.ReadFile(daemonLog)
	require.NoError(t, err)
	assert.Contains(t, string(log), ids[dh]+"/cni-"+dh+"/net1: releasing lease", "the DEL reached the dhcp daemon")
}

// podRules are the node's nat rules whose comment names the sandbox (bridge's
// masquerade, portmap's DNAT).
func podRules(id string) []string {
	var out []string
	for _, r := range testenv.IPTablesRules("iptables", "nat") {
		if strings.Contains(r, id) {
			out = append(out, r)
		}
	}
	return out
}
