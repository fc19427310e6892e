package plan

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nri-cni/nri-cni/cni"
)

// WithResourceName is the network n of NetworkAttachmentDefinition ref
// taking its device from the device plugin resource res (the NAD's
// AnnotationResourceName; "": n as is). The name must be an extended
// resource's, as the kubelet allocates them: a NAD with another is
// refused (ErrBadNAD), naming the annotation. n is not changed (sources
// share it).
func WithResourceName(ref NADRef, n *cni.Network, res string) (*cni.Network, error) {
	if res == "" {
		return n, nil
	}
	if err := ValidResourceName(res); err != nil {
		return nil, fmt.Errorf("%w %s: annotation %s: %w", ErrBadNAD, ref, AnnotationResourceName, err)
	}
	withRes := *n
	withRes.ResourceName = res
	return &withRes, nil
}

// ValidResourceName checks a device plugin resource name (a
// NetworkAttachmentDefinition's k8s.v1.cni.cncf.io/resourceName): an
// extended resource's, <domain>/<name> (vendor.example/sriov_a), as device
// plugins register them and pods request them, outside kubernetes.io.
func ValidResourceName(res string) error {
	if errs := validation.IsQualifiedName(res); len(errs) > 0 {
		return fmt.Errorf("%q is not a resource name: %s", res, strings.Join(errs, "; "))
	}
	domain, _, ok := strings.Cut(res, "/")
	if !ok {
		return fmt.Errorf("%q is not a device plugin resource: it needs a domain (<domain>/<name>, e.g. intel.com/sriov_netdevice)", res)
	}
	if domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") {
		return fmt.Errorf("%q is not a device plugin resource: the kubernetes.io domain is Kubernetes's own", res)
	}
	return nil
}

// AnnotationResourceClaim is nri-cni's NetworkAttachmentDefinition
// annotation naming the ResourceClaim request whose device the network
// takes: "<claim>/<request>" (or "<claim>/<request>/<subrequest>"), where
// <claim> is the pod's name for the claim (spec.resourceClaims[].name) or
// the ResourceClaim's own name. For devices of a DRA driver that publishes
// no k8s.cni.cncf.io/resourceName attribute (dranet), or to pick one claim
// of several.
const AnnotationResourceClaim = "nri-cni.io/resourceClaim"

// WithResourceClaim is the network n of NetworkAttachmentDefinition ref
// taking its device from the claim request v names (AnnotationResourceClaim;
// "": n as is). A NAD with both this and AnnotationResourceName, or a value
// that is not "<claim>/<request>[/<subrequest>]" of DNS labels, is refused
// (ErrBadNAD), naming the annotation. n is not changed (sources share it).
func WithResourceClaim(ref NADRef, n *cni.Network, v string) (*cni.Network, error) {
	if v == "" {
		return n, nil
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %s: annotation %s: %s", ErrBadNAD, ref, AnnotationResourceClaim, fmt.Sprintf(format, a...))
	}
	if n.ResourceName != "" {
		return nil, bad("the NAD also has %s %q: a network takes its device from one of them", AnnotationResourceName, n.ResourceName)
	}
	parts := strings.Split(v, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, bad("%q is not <claim>/<request> or <claim>/<request>/<subrequest>", v)
	}
	for i, p := range parts {
		what := [...]string{"claim", "request", "subrequest"}[i]
		if i == 0 {
			// A ResourceClaim's name is a DNS subdomain, a pod's name for
			// it a DNS label: the subdomain admits both.
			if errs := validation.IsDNS1123Subdomain(p); len(errs) > 0 {
				return nil, bad("%s %q: %s", what, p, strings.Join(errs, "; "))
			}
			continue
		}
		if errs := validation.IsDNS1123Label(p); len(errs) > 0 {
			return nil, bad("%s %q: %s", what, p, strings.Join(errs, "; "))
		}
	}
	withClaim := *n
	withClaim.DeviceClaim = cni.ClaimRequest{Claim: parts[0], Request: strings.Join(parts[1:], "/")}
	return &withClaim, nil
}
