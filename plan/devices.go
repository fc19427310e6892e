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
