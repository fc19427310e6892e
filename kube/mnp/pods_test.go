package mnp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/netpol"
)

const node = "node-a"

// status is a network-status annotation of entries "name=ip,ip" ("*name":
// default).
func status(entries ...string) string {
	type st struct {
		Name    string   `json:"name"`
		IPs     []string `json:"ips,omitempty"`
		Default bool     `json:"default,omitempty"`
	}
	var out []st
	for _, e := range entries {
		name, ips, _ := strings.Cut(e, "=")
		s := st{Name: strings.TrimPrefix(name, "*"), Default: strings.HasPrefix(name, "*")}
		if ips != "" {
			s.IPs = strings.Split(ips, ",")
		}
		out = append(out, s)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func pod(ns, name, nodeName, netStatus string, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels,
		Annotations: map[string]string{"big": strings.Repeat("x", 2000)}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "k"}}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "i",
			Env: []corev1.EnvVar{{Name: "E", Value: "v"}}, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80},
				{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {ContainerPort: 9090}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"}}
	if netStatus != "" {
		p.Annotations[AnnotationNetworkStatus] = netStatus
	}
	return p
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestCompactKeepsOnlyRelevantPods(t *testing.T) {
	manyLabels := map[string]string{}
	for i := range 65 {
		manyLabels[fmt.Sprint("k", i)] = "v"
	}
	var manyEntries, manyIPs []string
	for i := range 40 {
		manyEntries = append(manyEntries, fmt.Sprintf("ns/net%d=10.1.%d.1", i, i))
		manyIPs = append(manyIPs, fmt.Sprintf("10.2.0.%d", i))
	}
	cases := []struct {
		name      string
		pod       *corev1.Pod
		keep      bool
		local     bool
		addrs     map[netpol.Identity][]netip.Addr
		labels    int // labels kept
		truncated bool
	}{
		{name: "remote, no network-status: dropped", pod: pod("a", "p", "node-b", "", map[string]string{"x": "y"})},
		{name: "remote, default entry only: dropped", pod: pod("a", "p", "node-b", status("*cbr0=10.0.0.1"), nil)},
		{name: "remote, entry without IPs: dropped", pod: pod("a", "p", "node-b", status("a/net1"), nil)},
		{name: "remote, bad JSON: dropped", pod: pod("a", "p", "node-b", "[{", nil)},
		{name: "remote, NAD entry: peer", pod: pod("a", "p", "node-b", status("*cbr0=10.0.0.1", "a/net1=10.1.0.5,fd00::5"),
			map[string]string{"app": "x"}), keep: true, labels: 1,
			addrs: map[netpol.Identity][]netip.Addr{{NAD: "a/net1"}: {addr("10.1.0.5"), addr("fd00::5")}}},
		{name: "remote, node network and CIDR form", pod: pod("a", "p", "", status("storage=10.3.0.7/24"), nil), keep: true,
			addrs: map[netpol.Identity][]netip.Addr{{Node: "storage"}: {addr("10.3.0.7")}}},
		{name: "remote, labels over cap: truncated", pod: pod("a", "p", "node-b", status("a/n=10.1.0.5"), manyLabels), keep: true,
			truncated: true, addrs: map[netpol.Identity][]netip.Addr{{NAD: "a/n"}: {addr("10.1.0.5")}}},
		{name: "remote, 40 entries: 32 kept", pod: pod("a", "p", "node-b", status(manyEntries...), nil), keep: true},
		{name: "remote, 40 IPs: 16 kept", pod: pod("a", "p", "node-b", status("a/n="+strings.Join(manyIPs, ",")), nil), keep: true},
		{name: "local, no network-status: target", pod: pod("a", "p", node, "", manyLabels), keep: true, local: true, labels: 65},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := compact(c.pod, node)
			if e.keep != c.keep || e.local != c.local {
				t.Fatalf("keep %v local %v, want %v %v", e.keep, e.local, c.keep, c.local)
			}
			if e.peer.Namespace != "a" || e.peer.Name != "p" {
				t.Errorf("key %s", e.key())
			}
			if !c.keep {
				if e.peer.Labels != nil || e.peer.NamedPorts != nil || e.peer.Addrs != nil {
					t.Errorf("a dropped pod keeps data: %+v", e.peer)
				}
				return
			}
			if len(e.peer.Labels) != c.labels || e.peer.LabelsTruncated != c.truncated {
				t.Errorf("labels %d truncated %v, want %d %v", len(e.peer.Labels), e.peer.LabelsTruncated, c.labels, c.truncated)
			}
			want := []netpol.NamedPort{{Name: "http", Protocol: netpol.ProtoTCP, Port: 80}, {Name: "dns", Protocol: netpol.ProtoUDP, Port: 53}}
			if fmt.Sprint(e.peer.NamedPorts) != fmt.Sprint(want) {
				t.Errorf("named ports %v, want %v", e.peer.NamedPorts, want)
			}
			switch {
			case c.addrs != nil:
				if fmt.Sprint(e.peer.Addrs) != fmt.Sprint(c.addrs) {
					t.Errorf("addrs %v, want %v", e.peer.Addrs, c.addrs)
				}
			case strings.Contains(c.name, "40 entries"):
				if len(e.peer.Addrs) != maxStatusEntries {
					t.Errorf("%d identities kept, want %d", len(e.peer.Addrs), maxStatusEntries)
				}
			case strings.Contains(c.name, "40 IPs"):
				if n := len(e.peer.Addrs[netpol.Identity{NAD: "a/n"}]); n != maxIPsPerEntry {
					t.Errorf("%d IPs kept, want %d", n, maxIPsPerEntry)
				}
			}
		})
	}
}

func TestCompactTerminalAndSidecars(t *testing.T) {
	p := pod("a", "p", "node-b", status("a/n=10.1.0.5"), nil)
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = []corev1.Container{{Name: "once", Ports: []corev1.ContainerPort{{Name: "init", ContainerPort: 1}}},
		{Name: "side", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100}}}}
	p.Status.Phase = corev1.PodSucceeded
	e := compact(p, node)
	if !e.terminal {
		t.Error("a Succeeded pod is not terminal")
	}
	if e.peer.NamedPorts[0].Name != "metrics" || len(e.peer.NamedPorts) != 3 {
		t.Errorf("named ports %v: want the sidecar's, not the init container's", e.peer.NamedPorts)
	}
}

// The store through the reflector's calls: only relevant pods reach the
// index, a pod that stops being relevant leaves it, Replace replaces.
func TestPodStore(t *testing.T) {
	c := newCache(node, netpol.DefaultLimits())
	s := &podStore{node: node, apply: c.applyPod, reset: c.resetPods}
	count := func() int {
		n := 0
		for _, m := range c.pods {
			n += len(m)
		}
		return n
	}
	remote := pod("a", "peer", "node-b", status("a/n=10.1.0.5"), nil)
	plain := pod("a", "plain", "node-b", "", nil)
	local := pod("b", "mine", node, "", nil)
	tr := s.Transformer()
	buffered := []any{}
	for _, p := range []*corev1.Pod{remote, plain, local} {
		o, _ := tr(p) // as the reflector's WatchList buffer holds them
		if _, ok := o.(*podEntry); !ok {
			t.Fatalf("transform gave %T", o)
		}
		if _, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err != nil {
			t.Fatalf("the WatchList buffer cannot key a reduced pod: %v", err)
		}
		buffered = append(buffered, o)
	}
	_ = s.Replace(buffered, "1")
	if count() != 2 || c.pods["a"]["plain"] != nil || !c.podsSynced.Load() {
		t.Fatalf("after Replace: %d pods, plain kept %v", count(), c.pods["a"]["plain"] != nil)
	}
	_ = s.Add(pod("c", "other", "node-b", "", nil))
	if count() != 2 {
		t.Error("an irrelevant pod was added")
	}
	gone := remote.DeepCopy()
	delete(gone.Annotations, AnnotationNetworkStatus)
	_ = s.Update(gone)
	if c.pods["a"]["peer"] != nil {
		t.Error("a pod whose network-status went away is still a peer")
	}
	_ = s.Delete(cache.DeletedFinalStateUnknown{Key: "b/mine", Obj: local})
	if count() != 0 {
		t.Errorf("%d pods left after deletes", count())
	}
}
