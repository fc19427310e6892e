package k8s

// MultiNetworkPolicy on the real kubelet (the overlay applies the CRD and
// deploy/multinetworkpolicy; the test turns enforcement on in nri.conf):
// real TCP and UDP traffic between pods of the test's own namespaces, run
// by the test process inside the pods' network namespaces; probe
// containers that connect at their very first instruction; updates of a
// policy, of a pod's labels and a hot-plugged interface; a claim-attached
// network; the table in the pod's netns and not in the host's.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/nft"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

const (
	tcp = "tcp"
	udp = "udp"
)

// TestMultiNetworkPolicy: a server on a nad-* bridge NAD of namespace A,
// selected by a policy whose ingress allows a podSelector client (A), any
// pod of a labelled namespace B (on B's NAD of the same network: the
// policy is for both), an ipBlock peer, on TCP and UDP; and whose egress
// allows TCP to the podSelector client only. Then: probe pods (one denied
// by the server, one whose own egress is denied, one allowed); a policy
// change (allow → deny), a label change (refused → allowed) and a
// hot-plugged interface of a policy's network, each observed and its
// latency logged; a claim-attached interface isolated by a policy naming
// its node network.
func TestMultiNetworkPolicy(t *testing.T) {
	f := newFixture(t)
	f.withMNP()

	nsA, nsB := harness.RandomName("mnp-a-"), harness.RandomName("mnp-b-")
	peerLabel := harness.RandomName("peer-")
	f.namespace(nsA)
	f.namespace(nsB)
	_, err := f.k.CoreV1().Namespaces().Patch(f.ctx, nsB, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"mnp-peer":"`+peerLabel+`"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)

	// One network, as a NAD in each namespace: the same bridge, subnet and
	// CNI name (one host-local store).
	netName, bridge, subnet := harness.RandomName("nad-mnp-"), k8sdeploy.NADBridge(), k8sdeploy.NADSubnet()
	cfg := bridgeConfig("cni-"+netName, bridge, subnet)
	f.createNAD(nsA, netName, cfg)
	f.createNAD(nsB, netName, cfg)
	t.Cleanup(func() { _ = deleteLink(bridge) })
	// The hot-plug network, in A.
	hot := f.newNAD(nsA, harness.RandomName("nad-mnph-"))
	f.cleanupOwnPods(nsA)
	f.cleanupOwnPods(nsB)
	onNet := map[string]string{npwgAnnotation: netName}
	onHot := map[string]string{npwgAnnotation: hot.Name}

	pods := []struct {
		ns, name    string
		annotations map[string]string
		labels      []string
	}{
		{nsA, "server", onNet, []string{"app", "server"}},
		{nsA, "client", onNet, []string{"role", "client"}},
		{nsA, "refused", onNet, []string{"role", "other"}},
		{nsA, "ipblock", onNet, []string{"role", "ipblock"}},
		{nsB, "nsclient", onNet, []string{"role", "other"}},
		{nsA, "hot-ok", onHot, []string{"role", "hotok"}},
		{nsA, "hot-denied", onHot, []string{"role", "other"}},
	}
	netns := map[string]string{}
	for _, p := range pods {
		f.create(f.labelled(p.name, p.ns, p.annotations, p.labels...))
	}
	for _, p := range pods {
		netns[p.name] = f.netnsOf(p.ns, p.name)
		f.networkStatus(p.ns, p.name, 2) // the peers' addresses are in the API
	}
	addr := map[string]string{}
	for _, p := range pods {
		addr[p.name] = f.addrOf(netns[p.name], "net1")
	}
	t.Logf("server %s, client %s, refused %s, ipblock %s, nsclient %s (%s); hot-ok %s, hot-denied %s (%s)",
		addr["server"], addr["client"], addr["refused"], addr["ipblock"], addr["nsclient"], subnet,
		addr["hot-ok"], addr["hot-denied"], hot.Subnet)
	for _, n := range []string{"server", "client", "refused"} {
		f.listen(netns[n])
	}
	c := func(from, to, proto string) conn {
		return conn{from: from, fromNetns: netns[from], to: to, addr: addr[to], proto: proto}
	}

	// Before any policy: everything connects.
	f.mustPass(c("refused", "server", tcp))
	f.mustPass(c("server", "refused", tcp))

	ingress := networkingv1.NetworkPolicyIngressRule{
		From: []networkingv1.NetworkPolicyPeer{
			{PodSelector: labelsSel("role", "client")},
			{NamespaceSelector: labelsSel("mnp-peer", peerLabel)},
			{IPBlock: &networkingv1.IPBlock{CIDR: addr["ipblock"] + "/32"}},
		},
		Ports: portsOf(corev1.ProtocolTCP, corev1.ProtocolUDP),
	}
	serverSpec := networkingv1.NetworkPolicySpec{
		PodSelector: *labelsSel("app", "server"),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{ingress},
		Egress: []networkingv1.NetworkPolicyEgressRule{{
			To: []networkingv1.NetworkPolicyPeer{{PodSelector: labelsSel("role", "client")}}, Ports: portsOf(corev1.ProtocolTCP)}},
	}
	policyFor := nsA + "/" + netName + ", " + nsB + "/" + netName
	at := f.applyMNP(nsA, "server", policyFor, serverSpec)
	seen := f.untilEffect(c("refused", "server", tcp), false)
	t.Logf("policy created: the refused client refused %s after the create call returned", seen.Sub(at).Round(time.Millisecond))
	// Steps, not subtests: the fixture's helpers fail the test they were
	// made for.
	step := func(name string, fn func()) {
		t.Logf("--- %s", name)
		fn()
	}

	step("reachability", func() {
		for _, p := range []string{tcp, udp} {
			f.mustPass(c("client", "server", p))
			f.mustPass(c("nsclient", "server", p))
			f.mustPass(c("ipblock", "server", p))
			f.mustFail(c("refused", "server", p))
		}
		// Egress: TCP to the podSelector client only.
		f.mustPass(c("server", "client", tcp))
		f.mustFail(c("server", "client", udp))
		f.mustFail(c("server", "refused", tcp))
		// Not selected: the clients among themselves.
		f.mustPass(c("refused", "client", tcp))
	})

	step("table in the pod's netns, not the host's", func() {
		tables, err := nftTables(netns["server"])
		require.NoError(t, err)
		assert.Contains(t, tables, nft.TableName, "inet %s in the server's netns", nft.TableName)
		chains, err := nftChains(netns["server"])
		require.NoError(t, err)
		assert.NotEmpty(t, chains)
		t.Logf("server's netns: inet tables %v, chains of %s %v", tables, nft.TableName, chains)
		host, err := nftTables("")
		require.NoError(t, err)
		assert.NotContains(t, host, nft.TableName, "no %s table in the host's netns", nft.TableName)
	})

	step("probe at the container's first instruction", func() {
		// Refused by the server's ingress.
		for _, p := range []string{tcp, udp} {
			code, out := f.probePod(nsA, "probe-denied-"+p, p, addr["server"], onNet, "role", "other")
			assert.EqualValues(t, 3, code, "denied %s probe: %s", p, out)
			t.Logf("denied %s probe: exit %d, %q", p, code, out)
		}
		// Allowed by the server but its own egress denied (a policy that
		// selects the probe pod): the table was in its netns before its
		// interface existed, or the first SYN would have gone out.
		f.applyMNP(nsA, "probe-egress", nsA+"/"+netName, networkingv1.NetworkPolicySpec{
			PodSelector: *labelsSel("probe", "egress-denied"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		})
		code, out := f.probePod(nsA, "probe-egress", tcp, addr["server"], onNet, "role", "client", "probe", "egress-denied")
		assert.EqualValues(t, 3, code, "egress-denied probe: %s", out)
		t.Logf("egress-denied probe: exit %d, %q", code, out)
		// The control: allowed both ways (TCP: the SYN retried while the
		// server's rules learn the new peer's address).
		code, out = f.probePod(nsA, "probe-allowed", tcp, addr["server"], onNet, "role", "client")
		assert.EqualValues(t, 0, code, "allowed probe: %s", out)
		t.Logf("allowed probe: exit %d, %q", code, out)
	})

	step("label change: refused becomes allowed", func() {
		at := f.patchPod(nsA, "refused", `{"metadata":{"labels":{"role":"client"}}}`)
		seen := f.untilEffect(c("refused", "server", tcp), true)
		t.Logf("label change: the client connects %s after the patch returned", seen.Sub(at).Round(time.Millisecond))
		f.mustPass(c("refused", "server", udp))
		f.mustPass(c("server", "refused", tcp))
	})

	step("policy change: allow → deny", func() {
		spec := serverSpec.DeepCopy()
		spec.Ingress[0].From = spec.Ingress[0].From[1:] // no podSelector peer
		at := f.applyMNP(nsA, "server", policyFor, *spec)
		seen := f.untilEffect(c("client", "server", tcp), false)
		t.Logf("policy change: the podSelector client refused %s after the update returned", seen.Sub(at).Round(time.Millisecond))
		f.mustFail(c("client", "server", udp))
		f.mustPass(c("nsclient", "server", tcp))
		f.mustPass(c("ipblock", "server", udp))
	})

	step("hot-plugged interface filtered from the start", func() {
		f.applyMNP(nsA, "hot", hot.Name, networkingv1.NetworkPolicySpec{
			PodSelector: *labelsSel("app", "server"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: labelsSel("role", "hotok")}}, Ports: portsOf(corev1.ProtocolTCP)}},
		})
		at := f.patchPod(nsA, "server", fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, npwgAnnotation, netName+", "+hot.Name))
		status := f.networkStatus(nsA, "server", 3)
		listed := time.Now()
		require.Equal(t, "net2", status[2].Interface)
		require.NotEmpty(t, status[2].IPs)
		addr["server-net2"] = status[2].IPs[0]
		// Right away: the denied probe first, one try.
		f.mustFail(conn{from: "hot-denied", fromNetns: netns["hot-denied"], to: "server net2", addr: addr["server-net2"], proto: tcp})
		t.Logf("hot-plug: network-status listed net2 (%s) %s after the annotation patch returned; refused at once",
			addr["server-net2"], listed.Sub(at).Round(time.Millisecond))
		f.mustFail(conn{from: "hot-denied", fromNetns: netns["hot-denied"], to: "server net2", addr: addr["server-net2"], proto: udp})
		f.mustPass(conn{from: "hot-ok", fromNetns: netns["hot-ok"], to: "server net2", addr: addr["server-net2"], proto: tcp})
		// net1's policy still holds.
		f.mustPass(c("nsclient", "server", tcp))
	})

	step("claim-attached network", func() {
		node := f.w.o.NetName
		f.nodeDevices(node)
		tmpl := harness.RandomName("mnp-claim-")
		f.claimTemplate(nsA, tmpl, netRequest{name: "net", network: node, config: `"interface":"dra0"`})
		f.applyMNP(nsA, "claim", node, networkingv1.NetworkPolicySpec{
			PodSelector: *labelsSel("app", "claim-server"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: labelsSel("role", "node-ok")}}, Ports: portsOf(corev1.ProtocolTCP, corev1.ProtocolUDP)}},
		})
		srv := f.claimPod("claim-server", nsA, nil, tmpl)
		srv.Labels["app"] = "claim-server"
		f.create(srv)
		onNode := map[string]string{k8sdeploy.Annotation: node}
		f.create(f.labelled("node-ok", nsA, onNode, "role", "node-ok"))
		f.create(f.labelled("node-denied", nsA, onNode, "role", "other"))
		for _, n := range []string{"claim-server", "node-ok", "node-denied"} {
			netns[n] = f.netnsOf(nsA, n)
			f.networkStatus(nsA, n, 2)
		}
		ready := time.Now()
		addr["claim-server"] = f.addrOf(netns["claim-server"], "dra0")
		addr["node-ok"] = f.addrOf(netns["node-ok"], "net1")
		f.listen(netns["claim-server"])
		// The allowed peer's address reaches the server's rules after it
		// attached: poll, then the denied one, one try.
		seen := f.untilEffect(c("node-ok", "claim-server", tcp), true)
		t.Logf("claim: dra0 %s; the allowed peer (%s) connects %s after the pods were Ready and listed in network-status",
			addr["claim-server"], addr["node-ok"], seen.Sub(ready).Round(time.Millisecond))
		f.mustPass(c("node-ok", "claim-server", udp))
		for _, p := range []string{tcp, udp} {
			f.mustFail(c("node-denied", "claim-server", p))
		}
		tables, err := nftTables(netns["claim-server"])
		require.NoError(t, err)
		assert.True(t, slices.Contains(tables, nft.TableName), "inet %s in the claim pod's netns: %v", nft.TableName, tables)
	})

	// nri-cni's own measure of the bound (cache saw a change → an affected
	// pod's rules applied): logged, not asserted.
	const h = "nri_cni_mnp_propagation_seconds"
	if n := f.metric(h + "_count"); n > 0 {
		t.Logf("%s: %.0f changes applied, mean %s, %.0f within 250 ms, %.0f within 1 s", h, n,
			time.Duration(f.metric(h+"_sum")/n*float64(time.Second)).Round(time.Millisecond),
			f.metric(h+`_bucket{le="0.25"}`), f.metric(h+`_bucket{le="1"}`))
	}
}
