package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	nadlisters "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/listers/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/plan"
)

// NADSource is plan.NADSource over an informer cache of every
// NetworkAttachmentDefinition (k8s.cni.cncf.io/v1) in the cluster. Network
// reads the cache only. A changed or deleted object affects later lookups
// only: what is attached keeps the config libcni cached at its ADD.
type NADSource struct {
	informer cache.SharedIndexInformer
	lister   nadlisters.NetworkAttachmentDefinitionLister

	// policy judges every non-empty spec.config before it is parsed;
	// maxBytes bounds its size (kubernetes.maxNADConfigBytes).
	policy   *nadpolicy.Policy
	maxBytes int

	mu     sync.Mutex // guards parsed
	parsed map[string]parsedNAD
}

// parsedNAD memoises one object version's verdict: its Network, or why it
// is refused (size, policy, parse).
type parsedNAD struct {
	resourceVersion string
	net             *cni.Network
	err             error
}

// NewNADSource builds the informer; Run starts it. resync 0 = never.
// policy judges each NAD's spec.config (nil: the fail-closed code default,
// config.DefaultNADPolicy); maxBytes bounds it (0: the default).
func NewNADSource(client nadclient.Interface, resync time.Duration, policy *nadpolicy.Policy, maxBytes int) *NADSource {
	if policy == nil {
		policy = nadpolicy.Default()
	}
	if maxBytes <= 0 {
		maxBytes = config.DefaultMaxNADConfigBytes
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
		&nadv1.NetworkAttachmentDefinition{}, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	s := &NADSource{informer: inf, lister: nadlisters.NewNetworkAttachmentDefinitionLister(inf.GetIndexer()),
		policy: policy, maxBytes: maxBytes, parsed: map[string]parsedNAD{}}
	if err := inf.SetTransform(trimForCache(maxBytes)); err != nil {
		panic(err) // only for an informer already started: not this new one
	}
	// The memo holds one entry per NAD that exists: a new version replaces
	// its entry, a deleted NAD's goes with it. It is never dropped whole (a
	// cluster with more NADs than any fixed bound parsed every NAD again on
	// every refresh once it passed the bound).
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: s.forget}); err != nil {
		panic(err) // only for an informer already stopped: not this new one
	}
	return s
}

// forget drops a deleted NAD's memo entry.
func (s *NADSource) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(*nadv1.NetworkAttachmentDefinition)
	if !ok {
		return
	}
	s.mu.Lock()
	delete(s.parsed, plan.NADRef{Namespace: o.Namespace, Name: o.Name}.String())
	s.mu.Unlock()
}

// memoSize is how many NAD versions are memoised (tests).
func (s *NADSource) memoSize() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parsed)
}

type nadInterface interface {
	List(ctx context.Context, o metav1.ListOptions) (*nadv1.NetworkAttachmentDefinitionList, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// Run runs the informer until ctx ends.
func (s *NADSource) Run(ctx context.Context) { s.informer.RunWithContext(ctx) }

// HasSynced reports whether the first list has completed.
func (s *NADSource) HasSynced() bool { return s.informer.HasSynced() }

// Network implements plan.NADSource.
func (s *NADSource) Network(ref plan.NADRef) (*cni.Network, error) {
	if !s.informer.HasSynced() {
		return nil, plan.ErrSourceNotSynced
	}
	obj, err := s.lister.NetworkAttachmentDefinitions(ref.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w %s", plan.ErrNoSuchNAD, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s: %w", ref, err)
	}
	return s.parse(ref, obj)
}

// parse turns spec.config into a Network, once per object version
// (plan.ParseNADConfig: its size, then the NAD policy of the object's
// namespace, then cni.Parse). A refusal names the NAD, the key and the
// policy key, wraps plan.ErrBadNAD and a *nadpolicy.Violation
// (nadpolicy.ErrRefused), and fails every pod that names the NAD. The
// result is shared: the Manager copies it before adding per-pod args.
func (s *NADSource) parse(ref plan.NADRef, obj *nadv1.NetworkAttachmentDefinition) (*cni.Network, error) {
	key := ref.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.parsed[key]; ok && p.resourceVersion == obj.ResourceVersion {
		return p.net, p.err
	}
	n, err := s.parseConfig(ref, obj)
	if err == nil {
		n, err = plan.WithResourceName(ref, n, obj.Annotations[plan.AnnotationResourceName])
	}
	if err == nil {
		n, err = plan.WithResourceClaim(ref, n, obj.Annotations[plan.AnnotationResourceClaim])
	}
	p := parsedNAD{resourceVersion: obj.ResourceVersion, net: n, err: err}
	if _, exists, _ := s.informer.GetIndexer().GetByKey(ref.Namespace + "/" + ref.Name); exists {
		s.parsed[key] = p // not when deleted meanwhile: forget has run or will find nothing
	}
	return p.net, p.err
}

// parseConfig is plan.ParseNADConfig of the cached object, whose config
// trimForCache may have cut: that one is refused by its size as the API
// server holds it.
func (s *NADSource) parseConfig(ref plan.NADRef, obj *nadv1.NetworkAttachmentDefinition) (*cni.Network, error) {
	if v, ok := obj.Annotations[configBytesAnnotation]; ok {
		if size, err := strconv.Atoi(v); err == nil && size > s.maxBytes {
			return nil, fmt.Errorf("%w %s: %w", plan.ErrBadNAD, ref, nadpolicy.CheckSizeOf(size, s.maxBytes))
		}
	}
	return plan.ParseNADConfig(ref, obj.Spec.Config, s.policy, s.maxBytes)
}

// configBytesAnnotation is set on the cached copy of a NAD whose
// spec.config trimForCache cut: the config's size in bytes.
const configBytesAnnotation = "nri-cni.io/spec-config-bytes"

// trimForCache is the informer's transform, run on every object before it
// enters the cache. Every node caches every NAD of the cluster, and nothing
// but nri-cni bounds a NAD's size: the CRD (Multus's) has no maxLength, and
// the NAD admission policy may only warn, or be absent. So the cache keeps
// what nri-cni reads and no more: a spec.config larger than maxBytes as its
// first maxBytes+1 bytes (still refused, by the size recorded in
// configBytesAnnotation), and neither the managed fields nor kubectl's
// last-applied-configuration annotation (a second copy of the config).
func trimForCache(maxBytes int) cache.TransformFunc {
	return func(obj any) (any, error) {
		nad, ok := obj.(*nadv1.NetworkAttachmentDefinition)
		if !ok {
			return obj, nil
		}
		nad.ManagedFields = nil
		// configBytesAnnotation is this transform's alone, never the
		// object author's.
		delete(nad.Annotations, configBytesAnnotation)
		delete(nad.Annotations, corev1.LastAppliedConfigAnnotation)
		if len(nad.Spec.Config) > maxBytes {
			if nad.Annotations == nil {
				nad.Annotations = map[string]string{}
			}
			nad.Annotations[configBytesAnnotation] = strconv.Itoa(len(nad.Spec.Config))
			nad.Spec.Config = strings.Clone(nad.Spec.Config[:maxBytes+1])
		}
		return nad, nil
	}
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
	objs, err := s.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]NADEntry, 0, len(objs))
	for _, obj := range objs {
		ref := plan.NADRef{Namespace: obj.Namespace, Name: obj.Name}
		n, err := s.parse(ref, obj)
		out = append(out, NADEntry{Ref: ref, Network: n, Err: err})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref.String() < out[j].Ref.String() })
	return out
}

// OnChange calls fn (on the informer's goroutine: it must not block) after
// every add, update and delete the cache sees.
func (s *NADSource) OnChange(fn func()) {
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { fn() },
		UpdateFunc: func(any, any) { fn() },
		DeleteFunc: func(any) { fn() },
	})
}
