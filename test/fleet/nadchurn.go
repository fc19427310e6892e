package fleet

// A tenant's NAD churn loop, as every node sees it: NADs created and deleted
// in a namespace of their own, each change an event on every node's NAD
// watch and a kick of every node's DRA driver. What it costs each node: the
// ResourceSlice writes (bounded by the driver's publish bucket), the
// inventories built (refreshes at least MinRefresh apart), its requests, and
// CPU (this process simulates every agent: its CPU over the agents).

import (
	"context"
	"fmt"
	"os"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/kube/dra"
)

// ChurnNamespace holds the churn loop's NADs.
const ChurnNamespace = "fleet-churn"

// NADChurnResult is one NAD churn loop.
type NADChurnResult struct {
	Agents  int
	Changes int // NADs created and deleted
	// Seconds of churn; Window: churn and settling (what the counts cover).
	Seconds, Window float64
	// Agent: every agent's requests in the window.
	Agent Snapshot
	// Publishes and Refreshes: every agent's DRA driver in the window.
	Publishes, Refreshes int
	// SelfCPUSeconds: this process (every agent, and the loop's own
	// client) in the window.
	SelfCPUSeconds float64
	API            APIWindow
	// Limits the drivers ran with ("" = nri-cni's defaults).
	Limits string
}

// churnNAD is the loop's i-th NAD: deploy/base's policy allows it.
func churnNAD(i int) *nadv1.NetworkAttachmentDefinition {
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"churn-%d","plugins":[{"type":"bridge","bridge":"nad-churn",`+
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.251.%d.0/24"}]]}}]}`, i, 200+i%50)
	return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%05d", i), Namespace: ChurnNamespace},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: conf}}
}

// NADChurn creates a NAD rate times a second for d, deleting the one made
// keep changes before (so a few live at a time), then lets settle pass (the
// publishes the bucket put off) and counts.
func (f *Fleet) NADChurn(ctx context.Context, d time.Duration, rate float64, settle time.Duration) (NADChurnResult, error) {
	nc, err := nadclient.NewForConfig(f.c.RESTConfig)
	if err != nil {
		return NADChurnResult{}, fmt.Errorf("NAD client: %w", err)
	}
	if _, err := f.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ChurnNamespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return NADChurnResult{}, fmt.Errorf("namespace %s: %w", ChurnNamespace, err)
	}
	nads := nc.K8sCniCncfIoV1().NetworkAttachmentDefinitions(ChurnNamespace)
	agents := f.agents()
	driverCounts := func() (pub, ref int) {
		for _, a := range agents {
			if a.Driver != nil {
				pub += a.Driver.Publishes()
				ref += a.Driver.Refreshes()
			}
		}
		return pub, ref
	}
	before := f.Counts()
	pub0, ref0 := driverCounts()
	cpu0, err := procCPUSeconds(os.Getpid())
	if err != nil {
		return NADChurnResult{}, err
	}
	a0, err := SampleAPI(ctx, f.c)
	if err != nil {
		return NADChurnResult{}, err
	}
	const keep = 5
	start := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	changes, i := 0, 0
	for time.Since(start) < d {
		select {
		case <-ctx.Done():
			return NADChurnResult{}, ctx.Err()
		case <-tick.C:
		}
		seq := f.churnSeq + i
		if _, err := nads.Create(ctx, churnNAD(seq), metav1.CreateOptions{}); err != nil {
			return NADChurnResult{}, fmt.Errorf("churn: creating NAD %d: %w", seq, err)
		}
		changes++
		if i >= keep {
			if err := nads.Delete(ctx, churnNAD(seq-keep).Name, metav1.DeleteOptions{}); err != nil {
				return NADChurnResult{}, fmt.Errorf("churn: deleting NAD %d: %w", seq-keep, err)
			}
			changes++
		}
		i++
	}
	churned := time.Since(start)
	// The rest go, so the next loop starts from the same NADs.
	for j := max(i-keep, 0); j < i; j++ {
		if err := nads.Delete(ctx, churnNAD(f.churnSeq+j).Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return NADChurnResult{}, fmt.Errorf("churn: deleting NAD: %w", err)
		}
		changes++
	}
	f.churnSeq += i
	select {
	case <-ctx.Done():
		return NADChurnResult{}, ctx.Err()
	case <-time.After(settle):
	}
	a1, err := SampleAPI(ctx, f.c)
	if err != nil {
		return NADChurnResult{}, err
	}
	cpu1, err := procCPUSeconds(os.Getpid())
	if err != nil {
		return NADChurnResult{}, err
	}
	pub1, ref1 := driverCounts()
	return NADChurnResult{Agents: len(agents), Changes: changes, Seconds: churned.Seconds(), Window: time.Since(start).Seconds(),
		Agent: f.Counts().Sub(before), Publishes: pub1 - pub0, Refreshes: ref1 - ref0, SelfCPUSeconds: cpu1 - cpu0,
		API: Window(a0, a1), Limits: f.limitsName}, nil
}

// Unbounded are publishing limits as before issue 28: every kick refreshed
// after 500 ms of coalescing, every changed inventory published.
var Unbounded = dra.PublishLimits{Coalesce: 500 * time.Millisecond, MinRefresh: time.Millisecond, Burst: 1 << 20, Every: time.Millisecond}

// SetPublishing makes agents started from now on publish with limits
// (named name in results; zero limits: nri-cni's defaults).
func (f *Fleet) SetPublishing(name string, limits dra.PublishLimits) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limitsName, f.publishing = name, limits
}
