package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/plan"
)

// NADSource is plan.NADSource over an informer cache of every
// NetworkAttachmentDefinition (k8s.cni.cncf.io/v1) in the cluster. Network
// reads the cache only. A changed or deleted object affects later lookups
// only: what is attached keeps the config libcni cached at its ADD. The
// cache keeps of each NAD only what nri-cni reads (nadcache.go), within a
// budget for all of them (nadbudget.go); the content of a NAD the budget
// admits again is read back from the API server by one worker (refetch).
type NADSource struct {
	informer cache.SharedIndexInformer
	client   nadclient.Interface

	// policy judges every non-empty spec.config before it is parsed;
	// maxBytes bounds its size (kubernetes.maxNADConfigBytes).
	policy   *nadpolicy.Policy
	maxBytes int

	budget   *nadBudget
	queue    workqueue.TypedRateLimitingInterface[string] // keys to read back
	log      *logrus.Entry
	observer atomic.Pointer[NADCacheObserver]

	mu       sync.Mutex // guards onChange
	onChange []func()
}

// NADSourceOptions tune NewNADSource.
type NADSourceOptions struct {
	// Resync re-delivers the cache's objects this often (0: never).
	Resync time.Duration
	// Policy judges each NAD's spec.config (nil: the fail-closed code
	// default, config.DefaultNADPolicy); MaxConfigBytes bounds it (0: the
	// default).
	Policy         *nadpolicy.Policy
	MaxConfigBytes int
	// MaxCacheBytes bounds the whole cache, as NADCost counts (0:
	// config.DefaultMaxNADCacheBytes).
	MaxCacheBytes int
	// Log gets a line for each NAD the budget drops or admits again (nil:
	// none).
	Log *logrus.Entry
}

// NewNADSource builds the informer; Run starts it.
func NewNADSource(client nadclient.Interface, o NADSourceOptions) *NADSource {
	if o.Policy == nil {
		o.Policy = nadpolicy.Default()
	}
	if o.MaxConfigBytes <= 0 {
		o.MaxConfigBytes = config.DefaultMaxNADConfigBytes
	}
	if o.MaxCacheBytes <= 0 {
		o.MaxCacheBytes = config.DefaultMaxNADCacheBytes
	}
	if o.Log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.Log = logrus.NewEntry(l)
	}
	nads := func() nadInterface { return client.K8sCniCncfIoV1().NetworkAttachmentDefinitions(metav1.NamespaceAll) }
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return nads().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return nads().Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client),
		&nadv1.NetworkAttachmentDefinition{}, o.Resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](refetchBaseWait, refetchMaxWait),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(refetchQPS, refetchBurst)})
	s := &NADSource{informer: inf, client: client, policy: o.Policy, maxBytes: o.MaxConfigBytes,
		budget: newNADBudget(o.MaxCacheBytes), log: o.Log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nri-cni-nad-refetch"})}
	if err := inf.SetTransform(slimForCache(o.MaxConfigBytes)); err != nil {
		panic(err) // only for an informer already started: not this new one
	}
	// The budget follows the informer's every add, update and delete (one
	// listener: in order, one at a time).
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.account(obj, false) },
		UpdateFunc: func(_, obj any) { s.account(obj, false) },
		DeleteFunc: func(obj any) { s.account(obj, true) },
	}); err != nil {
		panic(err) // only for an informer already stopped: not this new one
	}
	return s
}

type nadInterface interface {
	List(ctx context.Context, o metav1.ListOptions) (*nadv1.NetworkAttachmentDefinitionList, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// HasSynced reports whether the first list has completed.
func (s *NADSource) HasSynced() bool { return s.informer.HasSynced() }

// Network implements plan.NADSource.
func (s *NADSource) Network(ref plan.NADRef) (*cni.Network, error) {
	if !s.informer.HasSynced() {
		return nil, plan.ErrSourceNotSynced
	}
	c, err := s.cached(ref.Namespace, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s: %w", ref, err)
	}
	if c == nil {
		return nil, fmt.Errorf("%w %s", plan.ErrNoSuchNAD, ref)
	}
	return s.parse(ref, c.cell)
}

// cached is the cache's object namespace/name (nil when there is none).
func (s *NADSource) cached(namespace, name string) (*cachedNAD, error) {
	obj, exists, err := s.informer.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil, err
	}
	c, ok := obj.(*cachedNAD)
	if !ok {
		return nil, fmt.Errorf("unexpected %T in the cache", obj)
	}
	return c, nil
}

// parse turns the cell's spec.config into a Network, once per object
// version (plan.ParseNADConfig: its size, then the NAD policy of the
// object's namespace, then cni.Parse), with the network's device from its
// annotations. A refusal names the NAD, the key and the policy key, wraps
// plan.ErrBadNAD and a *nadpolicy.Violation (nadpolicy.ErrRefused), and
// fails every pod that names the NAD. A NAD the budget dropped fails them
// with ErrNADCacheFull, one being read back with plan.ErrSourceNotSynced.
// The result is shared: the Manager copies it before adding per-pod args.
func (s *NADSource) parse(ref plan.NADRef, c *nadCell) (*cni.Network, error) {
	s.budget.mu.Lock()
	defer s.budget.mu.Unlock()
	switch c.state {
	case cellDropped:
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s: %w: %s; it comes back when NADs are deleted or made smaller, "+
			"or the budget raised", ref, ErrNADCacheFull, c.over.why(c.namespace))
	case cellRefetching:
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s: admitted again to this node's NAD cache (%s), its content "+
			"being read back from the API server: %w", ref, config.MaxNADCacheBytesKey, plan.ErrSourceNotSynced)
	}
	if c.parsed == nil {
		n, err := s.parseContent(ref, c.content)
		c.parsed = &parsedNAD{net: n, err: err}
	}
	return c.parsed.net, c.parsed.err
}

// parseContent is plan.ParseNADConfig of the kept content, then its device
// annotations. A part the cache kept only the size of is refused by it.
func (s *NADSource) parseContent(ref plan.NADRef, c *nadContent) (*cni.Network, error) {
	if c.configBytes > 0 {
		return nil, fmt.Errorf("%w %s: %w", plan.ErrBadNAD, ref, nadpolicy.CheckSizeOf(c.configBytes, s.maxBytes))
	}
	n, err := plan.ParseNADConfig(ref, c.config, s.policy, s.maxBytes)
	if err != nil {
		return nil, err
	}
	for _, key := range keptAnnotations {
		v, tooLong := c.annotation(key)
		if tooLong > 0 {
			return nil, fmt.Errorf("%w %s: annotation %s: is %d bytes, longer than any valid value (the cache keeps at most %d)",
				plan.ErrBadNAD, ref, key, tooLong, maxKeptAnnotationBytes)
		}
		switch key {
		case plan.AnnotationResourceName:
			n, err = plan.WithResourceName(ref, n, v)
		case plan.AnnotationResourceClaim:
			n, err = plan.WithResourceClaim(ref, n, v)
		}
		if err != nil {
			return nil, err
		}
	}
	return n, nil
}

// memoSize is how many NAD versions have their verdict memoised (tests).
func (s *NADSource) memoSize() int {
	s.budget.mu.Lock()
	defer s.budget.mu.Unlock()
	n := 0
	for _, c := range s.budget.cells {
		if c.parsed != nil {
			n++
		}
	}
	return n
}

// errNotSynced is returned by WaitForSync when ctx ends first.
var errNotSynced = errors.New("NetworkAttachmentDefinition cache not synced")

// WaitForSync waits until the first list completed or ctx ends.
func (s *NADSource) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return errNotSynced
	}
	return nil
}

// NADEntry is one NetworkAttachmentDefinition of the cache with its
// verdict: its Network (a nil List: the confDir network of that Name), or
// why it is refused.
type NADEntry struct {
	Ref     plan.NADRef
	Network *cni.Network
	Err     error
}

// List returns every cached NetworkAttachmentDefinition with its verdict,
// by namespace/name (nil until the cache has synced).
func (s *NADSource) List() []NADEntry {
	if !s.informer.HasSynced() {
		return nil
	}
	objs := s.informer.GetIndexer().List()
	out := make([]NADEntry, 0, len(objs))
	for _, obj := range objs {
		c, ok := obj.(*cachedNAD)
		if !ok {
			continue
		}
		ref := plan.NADRef{Namespace: c.Namespace, Name: c.Name}
		n, err := s.parse(ref, c.cell)
		out = append(out, NADEntry{Ref: ref, Network: n, Err: err})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref.String() < out[j].Ref.String() })
	return out
}

// OnChange calls fn (on the informer's, the budget settler's or the refetch
// worker's goroutine: it must not block) after every add, update and
// delete the cache sees, and after the budget dropped NADs or one came
// back.
func (s *NADSource) OnChange(fn func()) {
	s.mu.Lock()
	s.onChange = append(s.onChange, fn)
	s.mu.Unlock()
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { fn() },
		UpdateFunc: func(any, any) { fn() },
		DeleteFunc: func(any) { fn() },
	})
}

// changed calls OnChange's functions.
func (s *NADSource) changed() {
	s.mu.Lock()
	fns := slices.Clone(s.onChange)
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
