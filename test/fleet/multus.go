package fleet

// Multus thick's API traffic, simulated: NOT Multus's code, its request
// pattern. Per pod ADD, multus-daemon v4.2.3 does a GET of the pod, an
// update of pods/status carrying network-status and creates two Events
// (measured on this API server, /work/shared/FACTS.md); it also holds one
// pod informer per node (pkg/server/server.go: newPodInformer, field
// selector spec.nodeName, no resync), which is simulated too. What Multus
// does at DEL was not part of that measurement and is not simulated: the
// counts are a lower bound.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/kube"
)

// multusNode is the Multus pattern on one node.
type multusNode struct {
	node      *Node
	client    kubernetes.Interface
	counter   *Counter
	informer  cache.SharedIndexInformer
	cancel    context.CancelFunc
	transport *http.Transport
}

// startMultus connects as Multus's ServiceAccount with a token bound to a
// pod on n and starts its pod informer.
func startMultus(ctx context.Context, n *Node, admin *rest.Config, token string) (*multusNode, error) {
	m := &multusNode{node: n, counter: NewCounter()}
	ctx, m.cancel = context.WithCancel(ctx)
	rc := rest.AnonymousClientConfig(admin)
	tlsCfg, err := rest.TLSConfigFor(rc)
	if err != nil {
		return nil, fmt.Errorf("node %s: TLS config: %w", n.Name, err)
	}
	m.transport = utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: tlsCfg,
		DialContext: (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext})
	rc.TLSClientConfig, rc.Transport, rc.BearerToken = rest.TLSClientConfig{}, m.counter.Wrap(m.transport), token
	rc.UserAgent = "multus-pattern/" + n.Name
	if m.client, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("node %s: client: %w", n.Name, err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(m.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", n.Name).String()
		}))
	m.informer = factory.Core().V1().Pods().Informer()
	go m.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), m.informer.HasSynced) {
		m.stop()
		return nil, fmt.Errorf("node %s: Multus pattern's pod informer did not sync", n.Name)
	}
	return m, nil
}

func (m *multusNode) stop() {
	m.cancel()
	m.transport.CloseIdleConnections()
}

// add is Multus's ADD of p's networks, as its API requests: GET the pod,
// update pods/status with network-status, two Events (eth0, net1).
func (m *multusNode) add(ctx context.Context, p *corev1.Pod, ip string) error {
	pods := m.client.CoreV1().Pods(p.Namespace)
	cur, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("multus pattern: GET pod %s: %w", p.Name, err)
	}
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[kube.AnnotationNetworkStatus] = fmt.Sprintf(`[{"name":"default","interface":"eth0","ips":["%s"],"default":true},`+
		`{"name":"%s/%s","interface":"net1","ips":["10.251.0.9"],"mac":"02:fe:00:00:00:09","default":false}]`,
		ip, p.Namespace, p.Annotations["k8s.v1.cni.cncf.io/networks"])
	if _, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("multus pattern: pods/status of %s: %w", p.Name, err)
	}
	for _, msg := range []string{"Add eth0 [" + ip + "/24] from default", "Add net1 [10.251.0.9/24] from " + p.Namespace + "/" +
		p.Annotations["k8s.v1.cni.cncf.io/networks"]} {
		now := metav1.Now()
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: p.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: cur.UID, APIVersion: "v1"},
			Reason:         "AddedInterface", Message: msg, Type: corev1.EventTypeNormal, Count: 1,
			Source: corev1.EventSource{Component: "multus"}, FirstTimestamp: now, LastTimestamp: now}
		if _, err := m.client.CoreV1().Events(p.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("multus pattern: event of %s: %w", p.Name, err)
		}
	}
	return nil
}

// Multus is the Multus pattern on the fleet's nodes (nri-cni's agents
// stopped).
type Multus struct {
	f     *Fleet
	mu    sync.Mutex
	nodes map[string]*multusNode
}

// StartMultus returns the (empty) Multus pattern of f; Grow adds nodes.
func (f *Fleet) StartMultus() *Multus { return &Multus{f: f, nodes: map[string]*multusNode{}} }

// Grow starts the pattern on the fleet's first size nodes (they must
// exist), parallel at a time.
func (m *Multus) Grow(ctx context.Context, size, parallel int) error {
	nodes := m.f.Nodes()[:size]
	sem := make(chan struct{}, max(parallel, 1))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		m.mu.Lock()
		_, ok := m.nodes[n.Name]
		m.mu.Unlock()
		if ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			token, err := daemonToken(ctx, m.f.admin, MultusAccount, n.Name)
			if err != nil {
				errs[i] = err
				return
			}
			mn, err := startMultus(ctx, n, m.f.c.RESTConfig, token)
			if err != nil {
				errs[i] = err
				return
			}
			m.mu.Lock()
			m.nodes[n.Name] = mn
			m.mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Counts sums the pattern's counters.
func (m *Multus) Counts() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s Snapshot
	for _, mn := range m.nodes {
		s = s.Plus(mn.counter.Snapshot())
	}
	return s
}

// Churn churns perNode pods on each node running the pattern.
func (m *Multus) Churn(ctx context.Context, perNode, parallel int) (ChurnResult, error) {
	m.mu.Lock()
	var nodes []*Node
	for _, n := range m.f.Nodes() {
		if _, ok := m.nodes[n.Name]; ok {
			nodes = append(nodes, n)
		}
	}
	m.mu.Unlock()
	seq := 0
	var smu sync.Mutex
	life := func(ctx context.Context, n *Node, p *corev1.Pod, del func() error) error {
		smu.Lock()
		seq++
		ip := podRef(p, n, seq).IP
		smu.Unlock()
		m.mu.Lock()
		mn := m.nodes[n.Name]
		m.mu.Unlock()
		if err := mn.add(ctx, p, ip); err != nil {
			return err
		}
		return del()
	}
	return m.f.churn(ctx, nodes, perNode, parallel, m.Counts, life)
}

// Stop stops the pattern everywhere.
func (m *Multus) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, mn := range m.nodes {
		mn.stop()
		delete(m.nodes, name)
	}
}
