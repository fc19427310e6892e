package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/plan"
)

// workloadPod is a pod the fleet's workload creates: bound to node (no
// scheduler), asking for one NAD the Multus way, tolerating the taints
// the node lifecycle controller puts on nodes without a kubelet (else it
// would evict the pods after 5 minutes).
func workloadPod(name, node, nad string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{"app": "fleet"},
			Annotations: map[string]string{plan.AnnotationNPWGNetworks: nad}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "app", Image: "localhost/pause:local"}}},
	}
}

// podRef is p as n's runtime knows it once it runs its sandbox.
func podRef(p *corev1.Pod, n *Node, seq int) PodRef {
	uid := string(p.UID)
	return PodRef{Namespace: p.Namespace, Name: p.Name, UID: uid, Annotations: p.Annotations,
		SandboxID: "sb" + strings.ReplaceAll(uid, "-", ""), Netns: "/run/netns/fleet-" + uid,
		IP: fmt.Sprintf("10.%d.%d.%d", 64+n.Index/256%64, n.Index%256, seq%250+2)}
}

// lifecycle is what a plugin does with one pod the workload created, until
// the workload deletes it (del).
type lifecycle func(ctx context.Context, n *Node, p *corev1.Pod, del func() error) error

// ChurnResult is one churn: pods created, handled by the plugin and
// deleted, perNode on each node.
type ChurnResult struct {
	Pods    int
	Seconds float64
	API     APIWindow
	// Plugin: the plugin side's requests in the window (every agent's, or
	// every Multus pattern's).
	Plugin Snapshot
	// PodBytes: the size of one pod as the workload created it (JSON).
	PodBytes int
}

// churn runs perNode pod lifecycles on each node, one at a time per node,
// parallel nodes at a time, and measures the window.
func (f *Fleet) churn(ctx context.Context, nodes []*Node, perNode, parallel int, counts func() Snapshot, life lifecycle) (ChurnResult, error) {
	before := counts()
	a0, err := SampleAPI(ctx, f.c)
	if err != nil {
		return ChurnResult{}, err
	}
	var podBytes int
	var once sync.Once
	work := make(chan *Node)
	errs := make(chan error, len(nodes))
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				for j := range perNode {
					name := f.podName(n, "c")
					p, err := f.admin.CoreV1().Pods(Namespace).Create(ctx, workloadPod(name, n.Name, NADName(j%f.nads)), metav1.CreateOptions{})
					if err != nil {
						errs <- fmt.Errorf("creating pod %s: %w", name, err)
						break
					}
					once.Do(func() { data, _ := json.Marshal(p); podBytes = len(data) })
					del := func() error {
						err := f.admin.CoreV1().Pods(Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
						if err != nil {
							return fmt.Errorf("deleting pod %s: %w", name, err)
						}
						return nil
					}
					if err := life(ctx, n, p, del); err != nil {
						errs <- err
						break
					}
				}
			}
		}()
	}
	start := time.Now()
	for _, n := range nodes {
		work <- n
	}
	close(work)
	wg.Wait()
	secs := time.Since(start).Seconds()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return ChurnResult{}, err
	}
	a1, err := SampleAPI(ctx, f.c)
	if err != nil {
		return ChurnResult{}, err
	}
	return ChurnResult{Pods: perNode * len(nodes), Seconds: secs, API: Window(a0, a1), Plugin: counts().Sub(before), PodBytes: podBytes}, nil
}

// nriCNILife is a pod's life on a node with nri-cni: RunPodSandbox (the
// attach, which queues network-status), the status written, the pod
// deleted, StopPodSandbox and RemovePodSandbox.
func (f *Fleet) nriCNILife(seq *int) lifecycle {
	var mu sync.Mutex
	return func(ctx context.Context, n *Node, p *corev1.Pod, del func() error) error {
		mu.Lock()
		*seq++
		ref := podRef(p, n, *seq)
		mu.Unlock()
		if err := n.RunPod(ctx, ref); err != nil {
			return err
		}
		a := n.Agent()
		if err := waitUntil(ctx, time.Minute, func() bool { return a.Mode.Status.Pending() == 0 },
			fmt.Sprintf("node %s: network-status of pod %s written", n.Name, p.Name)); err != nil {
			return err
		}
		if err := del(); err != nil {
			return err
		}
		return n.StopPod(ctx, ref)
	}
}

// bareLife is a pod's life with no plugin: created and deleted (what the
// API server does for the workload alone).
func bareLife(_ context.Context, _ *Node, _ *corev1.Pod, del func() error) error { return del() }

// ChurnNRICNI churns perNode pods on every node with nri-cni's agents.
func (f *Fleet) ChurnNRICNI(ctx context.Context, perNode, parallel int) (ChurnResult, error) {
	seq := 0
	return f.churn(ctx, f.Nodes(), perNode, parallel, f.Counts, f.nriCNILife(&seq))
}

// ChurnBare churns perNode pods on every node with no plugin.
func (f *Fleet) ChurnBare(ctx context.Context, perNode, parallel int) (ChurnResult, error) {
	return f.churn(ctx, f.Nodes(), perNode, parallel, func() Snapshot { return Snapshot{} }, bareLife)
}

// Standing creates pods on every node that runs fewer than perNode, and
// runs them (attached, status written): the population a restart finds.
func (f *Fleet) Standing(ctx context.Context, perNode, parallel int) error {
	var short []*Node
	for _, n := range f.Nodes() {
		if n.Running() < perNode {
			short = append(short, n)
		}
	}
	if len(short) == 0 {
		return nil
	}
	seq := 1 << 20
	var mu sync.Mutex
	life := func(ctx context.Context, n *Node, p *corev1.Pod, _ func() error) error {
		mu.Lock()
		seq++
		ref := podRef(p, n, seq)
		mu.Unlock()
		return n.RunPod(ctx, ref)
	}
	if _, err := f.churn(ctx, short, perNode, parallel, f.Counts, life); err != nil {
		return err
	}
	return f.Idle(ctx, 5*time.Minute)
}
