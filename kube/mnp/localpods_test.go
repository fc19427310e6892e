package mnp

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/netpol"
)

// This node's pods reach LocalPods' subscribers as an informer would hand
// them over; other nodes' pods never do.
func TestLocalPodsFeed(t *testing.T) {
	c := newCache(node, netpol.DefaultLimits())
	s := &podStore{node: node, apply: c.applyPod, reset: c.resetPods}
	var got []string
	c.LocalPods().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { got = append(got, "add "+o.(*corev1.Pod).Name) },
		UpdateFunc: func(_, o any) { got = append(got, "update "+o.(*corev1.Pod).Annotations["n"]) },
		DeleteFunc: func(o any) { got = append(got, "delete "+o.(*corev1.Pod).Name) },
	})
	mk := func(name, nodeName, rv, ann string) *corev1.Pod {
		p := pod("a", name, nodeName, "", nil)
		p.ResourceVersion = rv
		p.Annotations["n"] = ann
		return p
	}
	_ = s.Replace([]any{mk("mine", node, "1", "x"), mk("theirs", "node-b", "1", "x")}, "1")
	_ = s.Update(mk("mine", node, "1", "x")) // the same version: nothing
	_ = s.Update(mk("mine", node, "2", "y")) // an annotation only: no peer change, still told
	_ = s.Update(mk("theirs", "node-b", "2", "y"))
	_ = s.Delete(mk("mine", node, "3", "y"))
	if want := "[add mine update y delete mine]"; fmt.Sprint(got) != want {
		t.Errorf("events %v, want %v", got, want)
	}
	p, ok := c.LocalPods().Get("a", "mine")
	if ok || p != nil {
		t.Error("a deleted pod is still there")
	}
	_ = s.Add(mk("again", node, "4", "z"))
	if keys := c.LocalPods().Keys(); fmt.Sprint(keys) != "[a/again]" {
		t.Errorf("keys %v", keys)
	}
	if p, ok := c.LocalPods().Get("a", "again"); !ok || p.Annotations["n"] != "z" || p.Spec.Containers != nil {
		t.Errorf("local pod %+v: want its metadata only", p)
	}
	labels, ports, ok := c.TargetOf("a", "again", "uid-again")
	if !ok || len(ports) != 2 || labels != nil {
		t.Errorf("TargetOf: %v %v %v", labels, ports, ok)
	}
	if _, _, ok := c.TargetOf("a", "again", "another-uid"); ok {
		t.Error("TargetOf answered for another pod of that name")
	}
	if _, _, ok := c.TargetOf("a", "theirs", "uid-theirs"); ok {
		t.Error("TargetOf answered for another node's pod")
	}
}

// Hot-plug's PodWatcher takes LocalPods as its shared feed.
var _ kube.SharedPods = LocalPods{}
