package mnp

// The three watches: MultiNetworkPolicies through a REST client of our own
// type, Namespaces, and pods through one reflector. All cluster-wide, all
// with WatchList semantics where the client supports them (as the NAD
// cache does), so a node's initial sync streams instead of listing.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
	"github.com/nri-cni/nri-cni/netpol"
)

// ErrCRDNotServed: the API server does not serve the MultiNetworkPolicy
// resource; the cache never syncs (every local pod keeps the deny-all
// table) until the CRD is installed.
var ErrCRDNotServed = errors.New("the API server does not serve " + v1beta1.GroupName + "/" + v1beta1.Version + " " +
	v1beta1.Resource + ": install the CustomResourceDefinition " + v1beta1.CRDName + " (deploy/crds/multinetworkpolicy)")

// PolicyClient lists and watches MultiNetworkPolicies of every namespace.
type PolicyClient interface {
	List(ctx context.Context, o metav1.ListOptions) (*v1beta1.MultiNetworkPolicyList, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// NewPolicyClient is a PolicyClient over a REST client of rc for our type.
func NewPolicyClient(rc *rest.Config) (PolicyClient, error) {
	s := runtime.NewScheme()
	if err := v1beta1.AddToScheme(s); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(rc)
	c.GroupVersion = &v1beta1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc2, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("MultiNetworkPolicy client: %w", err)
	}
	return &restPolicies{c: rc2, codec: runtime.NewParameterCodec(s)}, nil
}

type restPolicies struct {
	c     rest.Interface
	codec runtime.ParameterCodec
}

func (r *restPolicies) List(ctx context.Context, o metav1.ListOptions) (*v1beta1.MultiNetworkPolicyList, error) {
	out := &v1beta1.MultiNetworkPolicyList{}
	err := r.c.Get().Resource(v1beta1.Resource).VersionedParams(&o, r.codec).Do(ctx).Into(out)
	return out, err
}

func (r *restPolicies) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	o.Watch = true
	return r.c.Get().Resource(v1beta1.Resource).VersionedParams(&o, r.codec).Watch(ctx)
}

// resourceDiscovery is the part of discovery served asks.
type resourceDiscovery interface {
	ServerResourcesForGroupVersionWithContext(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error)
}

// discoveryOf is d as a resourceDiscovery (client-go's and its fake are).
func discoveryOf(d discovery.DiscoveryInterface) resourceDiscovery {
	if rd, ok := d.(resourceDiscovery); ok {
		return rd
	}
	return legacyDiscovery{d}
}

type legacyDiscovery struct{ d discovery.DiscoveryInterface }

func (l legacyDiscovery) ServerResourcesForGroupVersionWithContext(_ context.Context, gv string) (*metav1.APIResourceList, error) {
	return l.d.ServerResourcesForGroupVersion(gv)
}

// served checks discovery for the MultiNetworkPolicy resource.
func served(ctx context.Context, d resourceDiscovery) error {
	list, err := d.ServerResourcesForGroupVersionWithContext(ctx, v1beta1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return ErrCRDNotServed
	}
	if err != nil {
		return fmt.Errorf("discovery of %s: %w", v1beta1.SchemeGroupVersion, err)
	}
	if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == v1beta1.Resource }) {
		return ErrCRDNotServed
	}
	return nil
}

// sources are the informers and the reflector of one Cache.
type sources struct {
	policies, namespaces cache.SharedIndexInformer
	pods                 *cache.Reflector
}

// newSources builds the watches feeding c. core may implement
// IsWatchListSemanticsUnSupported (fake clientsets): then plain list+watch.
func newSources(c *Cache, core kubernetes.Interface, pc PolicyClient, onPolicy func(old, cur *cachedPolicy)) *sources {
	s := &sources{}
	pw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return pc.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return pc.Watch(ctx, o)
		},
	}
	s.policies = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(pw, pc),
		&v1beta1.MultiNetworkPolicy{}, 0, cache.Indexers{})
	_ = s.policies.SetTransform(policyTransform(c.limits))
	_, _ = s.policies.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { onPolicy(nil, asPolicy(obj)) },
		UpdateFunc: func(old, cur any) { onPolicy(asPolicy(old), asPolicy(cur)) },
		DeleteFunc: func(obj any) { onPolicy(asPolicy(obj), nil) },
	})

	nw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.CoreV1().Namespaces().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return core.CoreV1().Namespaces().Watch(ctx, o)
		},
	}
	s.namespaces = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(nw, core),
		&corev1.Namespace{}, 0, cache.Indexers{})
	_ = s.namespaces.SetTransform(namespaceTransform)
	_, _ = s.namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.applyNamespace(nil, asNamespace(obj)) },
		UpdateFunc: func(old, cur any) { c.applyNamespace(asNamespace(old), asNamespace(cur)) },
		DeleteFunc: func(obj any) { c.applyNamespace(asNamespace(obj), nil) },
	})

	podw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return core.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	store := &podStore{node: c.node, apply: c.applyPod, reset: c.resetPods}
	s.pods = cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(podw, core), &corev1.Pod{}, store,
		cache.ReflectorOptions{Name: "nri-cni-mnp-pods", TypeDescription: "*v1.Pod"})
	c.policiesSynced, c.namespacesSynced = s.policies.HasSynced, s.namespaces.HasSynced
	return s
}

func asPolicy(obj any) *cachedPolicy {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, _ := obj.(*cachedPolicy)
	return p
}

func asNamespace(obj any) *netpol.Namespace {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*cachedNamespace); ok {
		return n.ns
	}
	return nil
}

// run starts the watches: the namespaces and pods at once, the policies
// once discovery says the resource is served (checked again every
// retry, logging why not, until ctx ends).
func (s *sources) run(ctx context.Context, d resourceDiscovery, retry time.Duration, log *logrus.Entry,
	notServed func(error)) {
	go s.namespaces.RunWithContext(ctx)
	go s.pods.RunWithContext(ctx)
	said := ""
	for {
		err := served(ctx, d)
		notServed(err)
		if err == nil {
			break
		}
		if err.Error() != said { // once per distinct reason, not every retry
			said = err.Error()
			log.WithError(err).Warn("MultiNetworkPolicy enforcement not synced: every local pod's covered interfaces stay deny-all")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
	s.policies.RunWithContext(ctx)
}
