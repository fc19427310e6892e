package kube

// What the node's NAD cache holds of each NetworkAttachmentDefinition.
// Every node caches every NAD of the cluster, and a NAD is tenant input:
// the CRD (Multus's) bounds nothing but the API server's object size, so
// one NAD can carry ~256 KiB of annotations, thousands of labels, owner
// references and finalizers. The informer's transform therefore keeps
// exactly what nri-cni reads, each part bounded, in a type of its own:
//
//   - name, namespace, uid and resourceVersion (lookups, Events, the memo);
//   - spec.config, at most kubernetes.maxNADConfigBytes (a larger one is
//     kept as its size only, and refused by it);
//   - k8s.v1.cni.cncf.io/resourceName and nri-cni.io/resourceClaim, at most
//     maxKeptAnnotationBytes each (a longer one, which no valid value is,
//     is kept as its size only, and refused by it).
//
// Nothing else: no other annotation, no label, finalizer, owner reference
// or managed field. What the cache holds in total is bounded by the
// budget (nadbudget.go), which owns the kept content of each NAD (a
// nadCell): it can drop a NAD's content and bring it back without the
// informer, whose stored objects must never change.

import (
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/plan"
)

// maxKeptAnnotationBytes bounds each NAD annotation the cache keeps. The
// longest valid values are far shorter: a resource name is at most 317
// bytes (a 253-byte domain, '/', a 63-byte name), a claim request 381
// (<subdomain>/<label>/<label>).
const maxKeptAnnotationBytes = 512

// keptAnnotations are the NAD annotations nri-cni reads (kube.NADSource's
// parse): the only ones the cache keeps.
var keptAnnotations = [...]string{plan.AnnotationResourceName, plan.AnnotationResourceClaim}

// Costs of a cached NAD beyond its strings, in the bytes the budget counts
// (NADCost). Measured (TestNADCostCoversTheHeap, this machine): a cached
// NAD with its parsed network takes ~1.3 KiB of heap beside its config
// and plugins;
// the parsed network holds the config about twice again (libcni's copy of
// the list, each plugin's re-marshalled bytes) and ~290 bytes per plugin
// (its parsed structure), which the JSON objects of the config bound ('{').
const (
	nadFixedBytes     = 2 << 10
	nadConfigCopies   = 3
	nadPerObjectBytes = 320
)

// cachedNAD is the informer's stored object: the NAD's identity, and its
// content in a cell the budget owns. ObjectMeta holds only name,
// namespace, uid and resourceVersion.
type cachedNAD struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	cell *nadCell
}

// DeepCopyObject implements runtime.Object. The copy shares the cell: the
// cell is the NAD version's identity to the budget, not a value.
func (c *cachedNAD) DeepCopyObject() runtime.Object {
	out := &cachedNAD{TypeMeta: c.TypeMeta, cell: c.cell}
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// nadContent is what nri-cni reads of a NAD, each part bounded. A part
// over its bound is kept as its size only (the string empty).
type nadContent struct {
	config      string
	configBytes int // len(spec.config) when it is over the limit, else 0
	annotations [len(keptAnnotations)]keptAnnotation
}

// keptAnnotation is one of keptAnnotations: its value, or the size of one
// too long to be valid.
type keptAnnotation struct {
	value string
	bytes int // len(value) when it is over maxKeptAnnotationBytes, else 0
}

// contentOf is what the cache keeps of nad's content (also of a NAD read
// again by the budget's refetch).
func contentOf(nad *nadv1.NetworkAttachmentDefinition, maxConfigBytes int) *nadContent {
	c := &nadContent{config: nad.Spec.Config}
	if len(c.config) > maxConfigBytes {
		c.config, c.configBytes = "", len(nad.Spec.Config)
	}
	for i, key := range keptAnnotations {
		v := nad.Annotations[key]
		if len(v) > maxKeptAnnotationBytes {
			c.annotations[i] = keptAnnotation{bytes: len(v)}
		} else {
			c.annotations[i] = keptAnnotation{value: v}
		}
	}
	return c
}

// annotation is the kept value of key (one of keptAnnotations) and the size
// of a value too long to keep (0 otherwise).
func (c *nadContent) annotation(key string) (string, int) {
	for i, k := range keptAnnotations {
		if k == key {
			return c.annotations[i].value, c.annotations[i].bytes
		}
	}
	return "", 0
}

// NADCost is what one cached NAD counts against kubernetes.maxNADCacheBytes:
// a fixed 2 KiB (its objects, index entries and parsed network), its
// identity's and kept annotations' bytes, its spec.config three times (the
// cached text and the parsed network's copies) and 320 bytes per JSON
// object in it (an upper bound of its plugins' parsed structures).
func NADCost(namespace, name, uid, resourceVersion string, c *nadContent) int {
	n := nadFixedBytes + len(namespace) + len(name) + len(uid) + len(resourceVersion) +
		nadConfigCopies*len(c.config) + nadPerObjectBytes*strings.Count(c.config, "{")
	for _, a := range c.annotations {
		n += len(a.value)
	}
	return n
}

// slimForCache is the informer's transform: a NAD becomes a cachedNAD
// holding only what nri-cni reads (the file header). It is pure: the
// reflector may run it on objects that never reach the cache (the
// watch-list's temporary store), and again on its own output, which it
// returns as it is.
func slimForCache(maxConfigBytes int) cache.TransformFunc {
	return func(obj any) (any, error) {
		nad, ok := obj.(*nadv1.NetworkAttachmentDefinition)
		if !ok {
			return obj, nil // a cachedNAD already, or a tombstone
		}
		content := contentOf(nad, maxConfigBytes)
		out := &cachedNAD{TypeMeta: nad.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: nad.Namespace, Name: nad.Name,
			UID: nad.UID, ResourceVersion: nad.ResourceVersion}}
		out.cell = &nadCell{namespace: nad.Namespace, name: nad.Name, resourceVersion: nad.ResourceVersion,
			size: NADCost(nad.Namespace, nad.Name, string(nad.UID), nad.ResourceVersion, content), content: content}
		return out, nil
	}
}
