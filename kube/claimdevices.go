package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/kube/dradevice"
	"github.com/nri-cni/nri-cni/kube/podresources"
)

// A network whose NetworkAttachmentDefinition names a claim request
// (nri-cni.io/resourceClaim: <claim>/<request>) takes the devices another
// DRA driver allocated for that request of the pod's claim. Which claims
// are the pod's comes from the kubelet (the PodResources answer the pod's
// other device-backed networks share); the claim objects, with the
// request → device mapping and the driver's status data, from the API
// server: one GET per claim of the pod, only for pods with such a network
// (as Multus reads claims, and as every DRA kubelet plugin reads the claims
// it prepares). The claim must be reserved for the pod.

// ClaimGetter reads one ResourceClaim.
type ClaimGetter interface {
	Claim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// APIClaims is a ClaimGetter of the API server.
type APIClaims struct{ Client kubernetes.Interface }

// Claim implements ClaimGetter.
func (a APIClaims) Claim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	return a.Client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

// MaxPodClaims bounds the claims of one pod read to find the one a network
// names: a pod's spec has at most 128 (Kubernetes' limit), a network's pod
// far fewer; one with more is refused rather than costing the API server
// 128 GETs at each of its starts.
const MaxPodClaims = 16

// errNoSuchClaim: none of the pod's claims has the name the network gives.
var errNoSuchClaim = errors.New("the pod has no such claim")

// ClaimDevices implements attach.DeviceSource.
func (d DeviceSource) ClaimDevices(ctx context.Context, pod attach.DevicePod, r cni.ClaimRequest) ([]attach.Device, error) {
	if d.DRA == nil || d.Claims == nil {
		return nil, errors.New("nri-cni reads no ResourceClaims here (the API server serves no resource.k8s.io/v1)")
	}
	var names []string
	err := d.Client.Select(ctx, podresources.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, func(p *podresources.PodResources) error {
		names = names[:0]
		for _, c := range p.Claims() {
			if c.Namespace == pod.Namespace {
				names = append(names, c.Name)
			}
		}
		if len(names) == 0 {
			return fmt.Errorf("%w %q: the kubelet reports no ResourceClaim of the pod's containers (list it in a container's resources.claims)", errNoSuchClaim, r.Claim)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	claim, podClaim, err := d.findClaim(ctx, pod, names, r.Claim)
	if err != nil {
		return nil, err
	}
	resolver := *d.DRA
	resolver.Metadata = d.Metadata
	devs, err := resolver.Resolve(claim, dradevice.Ref{Request: r.Request, PodClaimName: podClaim, PodUID: types.UID(pod.UID)})
	if err != nil {
		return nil, err
	}
	out := make([]attach.Device, 0, len(devs))
	for _, dev := range devs {
		out = append(out, attach.Device{ID: dev.DeviceID, From: dev.Where(), Info: dev.Info})
	}
	return out, nil
}

// findClaim returns the pod's claim (of names, the kubelet's) that want
// names: the ResourceClaim of that name, else the one made from a template
// for the pod's claim of that name (its resource.kubernetes.io/pod-claim-name
// annotation), trying first the names the claim controller gives those
// (<pod>-<pod claim>-<suffix>). podClaim is want when matched by the
// annotation.
func (d DeviceSource) findClaim(ctx context.Context, pod attach.DevicePod, names []string, want string) (claim *resourceapi.ResourceClaim, podClaim string, _ error) {
	if slices.Contains(names, want) {
		c, err := d.Claims.Claim(ctx, pod.Namespace, want)
		if err != nil {
			return nil, "", fmt.Errorf("ResourceClaim %s/%s: %w", pod.Namespace, want, err)
		}
		return c, "", nil
	}
	if len(names) > MaxPodClaims {
		return nil, "", fmt.Errorf("%w %q: the pod has %d claims, more than the %d nri-cni reads to find one by its pod claim name (name the ResourceClaim itself)",
			errNoSuchClaim, want, len(names), MaxPodClaims)
	}
	likely := pod.Name + "-" + want + "-"
	order := slices.Clone(names)
	slices.SortStableFunc(order, func(a, b string) int {
		return boolRank(strings.HasPrefix(b, likely)) - boolRank(strings.HasPrefix(a, likely))
	})
	for _, name := range order {
		c, err := d.Claims.Claim(ctx, pod.Namespace, name)
		if err != nil {
			return nil, "", fmt.Errorf("ResourceClaim %s/%s: %w", pod.Namespace, name, err)
		}
		if c.Annotations[resourceapi.PodResourceClaimAnnotation] == want {
			return c, want, nil
		}
	}
	return nil, "", fmt.Errorf("%w %q: its claims are %s, none named so or made for its pod claim of that name (annotation %s)",
		errNoSuchClaim, want, strings.Join(names, ", "), resourceapi.PodResourceClaimAnnotation)
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}
