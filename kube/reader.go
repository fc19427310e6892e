package kube

import (
	"context"
	"fmt"

	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nri-cni/nri-cni/migrate"
	"github.com/nri-cni/nri-cni/plan"
)

// Reader reads what migrate-check judges, read-only: the pods and the
// NetworkAttachmentDefinitions (list, in pages of PageSize with
// limit/continue) and one ConfigMap (get). No watch, no write, no other
// resource: a ServiceAccount with list on pods and NADs and get on
// configmaps is enough.
type Reader struct {
	core kubernetes.Interface
	nad  nadclient.Interface
	// Host is the API server's address.
	Host string
	// PageSize is the items per list request (default 500, kubectl's).
	PageSize int64
}

// DefaultPageSize is kubectl's chunk size.
const DefaultPageSize = 500

// NewReader connects with the kubeconfig at path (empty: $KUBECONFIG, then
// ~/.kube/config) and its context (empty: the current one), or with the
// in-cluster config (the pod's ServiceAccount) when there is no kubeconfig.
func NewReader(path, kubeContext string) (*Reader, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes API client (kubeconfig %q, context %q): %w", path, kubeContext, err)
	}
	rc.UserAgent = "nri-cni-migrate-check"
	core, nad, err := clientsFor(rc)
	if err != nil {
		return nil, err
	}
	r := NewReaderFor(core, nad)
	r.Host = rc.Host
	return r, nil
}

// NewReaderFor reads through the given clients.
func NewReaderFor(core kubernetes.Interface, nad nadclient.Interface) *Reader {
	return &Reader{core: core, nad: nad, PageSize: DefaultPageSize}
}

// Inventory lists the pods of namespace (empty: every namespace) and every
// NetworkAttachmentDefinition (a pod may name another namespace's). Of a
// pod it keeps only what planning reads, and only if the check judges it
// (migrate.Judges: the NPWG annotation, or Multus's default-network) and it
// has not finished: the check holds annotations, not specs.
func (r *Reader) Inventory(ctx context.Context, namespace string) (migrate.Inventory, error) {
	var inv migrate.Inventory
	read := plan.ReadAnnotations()
	err := r.pages(ctx, "pods", func(o metav1.ListOptions) (string, error) {
		l, err := r.core.CoreV1().Pods(namespace).List(ctx, o)
		if err != nil {
			return "", err
		}
		for i := range l.Items {
			p := &l.Items[i]
			inv.Listed++
			if !migrate.Judges(p.Annotations) {
				continue
			}
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				inv.Finished++
				continue
			}
			ann := map[string]string{}
			for _, k := range read {
				if v, ok := p.Annotations[k]; ok {
					ann[k] = v
				}
			}
			pod := migrate.Pod{Namespace: p.Namespace, Name: p.Name, Annotations: ann, HostNetwork: p.Spec.HostNetwork}
			for _, ip := range p.Status.PodIPs {
				pod.IPs = append(pod.IPs, ip.IP)
			}
			inv.Pods = append(inv.Pods, pod)
		}
		return l.Continue, nil
	})
	if err != nil {
		return migrate.Inventory{}, err
	}
	err = r.pages(ctx, "NetworkAttachmentDefinitions", func(o metav1.ListOptions) (string, error) {
		l, err := r.nad.K8sCniCncfIoV1().NetworkAttachmentDefinitions(metav1.NamespaceAll).List(ctx, o)
		if err != nil {
			return "", err
		}
		for _, n := range l.Items {
			inv.NADs = append(inv.NADs, migrate.NAD{Namespace: n.Namespace, Name: n.Name, Config: n.Spec.Config,
				ResourceName: n.Annotations[migrate.AnnotationResourceName]})
		}
		return l.Continue, nil
	})
	if err != nil {
		return migrate.Inventory{}, err
	}
	return inv, nil
}

// pages calls list with limit PageSize and each continue token it returns
// until the last page. An expired token (the list changed for longer than
// the API server keeps it) is an error: run the check again.
func (r *Reader) pages(ctx context.Context, what string, list func(metav1.ListOptions) (string, error)) error {
	o := metav1.ListOptions{Limit: r.PageSize}
	if o.Limit <= 0 {
		o.Limit = DefaultPageSize
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("listing %s: %w", what, err)
		}
		next, err := list(o)
		if err != nil {
			return fmt.Errorf("listing %s: %w", what, err)
		}
		if next == "" {
			return nil
		}
		o.Continue = next
	}
}

// ConfigMapData is the data of ConfigMap namespace/name (the DaemonSet's:
// nri.conf and its networks).
func (r *Reader) ConfigMapData(ctx context.Context, namespace, name string) (map[string]string, error) {
	cm, err := r.core.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", namespace, name, err)
	}
	return cm.Data, nil
}
