package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
	"github.com/nri-cni/nri-cni/kube/mnp"
	"github.com/nri-cni/nri-cni/kube/mnp/mnptest"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/ir"
	"github.com/nri-cni/nri-cni/nft"
)

// The MultiNetworkPolicy section's API world: a fake clientset (pods,
// namespaces, discovery serving the CRD) and a fake policy client (a fixed
// list, then one watch the bench drives), as kube/mnp's own tests build it.

// mnpNode is the node the bench's local pods run on; peers run elsewhere.
const mnpNode = "bench-node"

// world is what one MNP instance watches.
type world struct {
	objs     []runtime.Object
	policies []v1beta1.MultiNetworkPolicy
}

func (w *world) namespace(name string, labels map[string]string) {
	w.objs = append(w.objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
}

func (w *world) pod(p *corev1.Pod) { w.objs = append(w.objs, p) }

// start builds the clients and an MNP over them, runs it until ctx ends and
// waits for its caches.
func (w *world) start(ctx context.Context, o mnp.Options) (*mnp.MNP, *mnptest.Policies, error) {
	core := fake.NewClientset(w.objs...)
	core.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: v1beta1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: v1beta1.Resource, Namespaced: true, Kind: v1beta1.Kind}}}}
	pc := &mnptest.Policies{Items: w.policies, W: watch.NewFakeWithChanSize(16, false)}
	o.Node = mnpNode
	m := mnp.New(core, pc, o)
	go m.Run(ctx)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := m.WaitForSync(sctx); err != nil {
		return nil, nil, err
	}
	return m, pc, nil
}

// netStatus is a network-status annotation with one entry on network.
func netStatus(network string, ips ...string) string {
	b, _ := json.Marshal([]struct {
		Name string   `json:"name"`
		IPs  []string `json:"ips"`
	}{{Name: network, IPs: ips}})
	return string(b)
}

// mnpPod is a pod of ns on node with labels and, when network is set, a
// network-status entry on it with ip, and two named container ports.
func mnpPod(ns, name, uid, node string, labels map[string]string, network, ip string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Labels: labels,
		Annotations: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if network != "" {
		p.Annotations[mnp.AnnotationNetworkStatus] = netStatus(network, ip)
	}
	return p
}

// peerIP is the i-th peer's address (10.201.0.0/16).
func peerIP(i int) string { return fmt.Sprintf("10.201.%d.%d", i>>8&255, i&255) }

// benchPolicy is a typical policy of ns for network selecting target: both
// directions; ingress from pods of a role in namespaces of a team, from an
// ipBlock with an except, on a port, a named port and a port range; egress
// to pods of ns and to an ipBlock on UDP 53. i varies roles, teams, CIDRs
// and port so that no two policies are alike.
func benchPolicy(ns, name, network string, target map[string]string, i int) v1beta1.MultiNetworkPolicy {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(p corev1.Protocol, v intstr.IntOrString, end int32) networkingv1.NetworkPolicyPort {
		np := networkingv1.NetworkPolicyPort{Protocol: &p, Port: &v}
		if end > 0 {
			np.EndPort = &end
		}
		return np
	}
	lbl := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	return v1beta1.MultiNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Generation: 1,
			ResourceVersion: "1", Annotations: map[string]string{netpol.PolicyForAnnotation: network}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: target},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: lbl("role", fmt.Sprint("client-", i%10)), NamespaceSelector: lbl("team", fmt.Sprint("t-", i%5))},
					{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("10.200.%d.0/24", i%256), Except: []string{fmt.Sprintf("10.200.%d.128/25", i%256)}}},
				},
				Ports: []networkingv1.NetworkPolicyPort{port(tcp, intstr.FromInt32(int32(80+i)), 0),
					port(tcp, intstr.FromString("http"), 0), port(tcp, intstr.FromInt32(9000), 9100)},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{PodSelector: lbl("role", "db")},
					{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("10.202.%d.0/24", i%256)}}},
				Ports: []networkingv1.NetworkPolicyPort{port(udp, intstr.FromInt32(53), 0), port(tcp, intstr.FromInt32(5432), 0)},
			}},
		}}
}

// peerWorld adds namespaces peers-0..nsCount-1 (team t-k) holding peers
// pods on other nodes, on network, with roles client-0..9; and, in ns, ten
// role=db pods: the peers the benchPolicy rules select.
func (w *world) peerWorld(ns, network string, nsCount, peers int) {
	for k := range nsCount {
		w.namespace(fmt.Sprint("peers-", k), map[string]string{"team": fmt.Sprint("t-", k%5)})
	}
	for i := range peers {
		pns := fmt.Sprint("peers-", i%nsCount)
		w.pod(mnpPod(pns, fmt.Sprint("peer-", i), fmt.Sprint("uid-peer-", i), fmt.Sprint("node-", i%50),
			map[string]string{"role": fmt.Sprint("client-", i%10)}, network, peerIP(i)))
	}
	for i := range 10 {
		w.pod(mnpPod(ns, fmt.Sprint("db-", i), fmt.Sprint("uid-db-", i), fmt.Sprint("node-", i),
			map[string]string{"role": "db"}, network, peerIP(peers+i)))
	}
}

// allChanged says whether every sandbox of before has a digest in now
// other than its digest in before (and not ""): every table reprogrammed.
func allChanged(before, now map[string]string) bool {
	for id, old := range before {
		if d, ok := now[id]; !ok || d == "" || d == old {
			return false
		}
	}
	return true
}

// cpuSeconds is user+sys of a getrusage reading.
func cpuSeconds(utimeSec, utimeUsec, stimeSec, stimeUsec int64) float64 {
	return float64(utimeSec+stimeSec) + float64(utimeUsec+stimeUsec)/1e6
}

// timedSource times each Render of the source it wraps (and passes the
// local peers through, as attach looks for them on Deps.Policy).
type timedSource struct {
	*mnp.Source
	mu      sync.Mutex
	renders map[string][]time.Duration // by the target's namespace
	last    ir.Ruleset                 // the last one not empty
}

func (s *timedSource) Render(ctx context.Context, t ir.Target) (ir.Ruleset, []ir.Note, error) {
	start := time.Now()
	rs, notes, err := s.Source.Render(ctx, t)
	s.mu.Lock()
	if s.renders == nil {
		s.renders = map[string][]time.Duration{}
	}
	s.renders[t.Namespace] = append(s.renders[t.Namespace], time.Since(start))
	if !rs.Empty() {
		s.last = rs
	}
	s.mu.Unlock()
	return rs, notes, err
}

// timedFirewall times each Apply of a ruleset not empty: the closed tables
// an attach programs before its ADDs (ir.Closed) apart from the full ones.
type timedFirewall struct {
	*nft.Programmer
	mu      sync.Mutex
	applies []time.Duration // full rulesets
	closed  []time.Duration // ir.Closed tables
}

func (f *timedFirewall) Apply(ctx context.Context, n netns.Netns, rs ir.Ruleset) error {
	start := time.Now()
	err := f.Programmer.Apply(ctx, n, rs)
	if !rs.Empty() {
		took := time.Since(start)
		f.mu.Lock()
		if ir.Closed(rs).Digest == rs.Digest {
			f.closed = append(f.closed, took)
		} else {
			f.applies = append(f.applies, took)
		}
		f.mu.Unlock()
	}
	return err
}

// rulesetSize counts a ruleset's rules and addresses.
func rulesetSize(rs ir.Ruleset) (rules, addrs int) {
	for _, c := range rs.Chains {
		rules += len(c.Rules)
		for _, r := range c.Rules {
			addrs += len(r.Addrs)
		}
	}
	return rules, addrs
}
