package migrate

import (
	"errors"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/plan"
)

// Reason classifies why a pod's outcome is not Multus's (or why nri-cni
// ignores its annotation). Stable: CI jobs may match on them.
type Reason string

// Reasons, from the errors planning wraps (never from their text).
const (
	// Refusals.
	ReasonLimits                = Reason("limits")                  // limits.* or kubernetes.maxNADConfigBytes
	ReasonNADPolicy             = Reason("nad-policy")              // kubernetes.nadPolicy refuses the NAD
	ReasonNamespaceIsolation    = Reason("namespace-isolation")     // a NAD of another namespace, not shared
	ReasonUnsupportedKey        = Reason("unsupported-key")         // a key of the spec nri-cni does not implement
	ReasonCapabilityNotAllowed  = Reason("capability-not-allowed")  // podCapabilities does not list it
	ReasonCapabilityNotDeclared = Reason("capability-not-declared") // no plugin of the NAD declares it
	ReasonCNIArgsNotAllowed     = Reason("cni-args-not-allowed")    // podCNIArgs does not list the key
	ReasonNoSuchNAD             = Reason("no-such-nad")
	ReasonBadNAD                = Reason("bad-nad")         // spec.config is not a CNI config nri-cni takes
	ReasonUnknownNetwork        = Reason("unknown-network") // an empty spec.config and no confDir network of the NAD's name
	ReasonBothAnnotations       = Reason("both-annotations")
	ReasonBadInterface          = Reason("interface-name-refused") // eth0, lo, invalid, or two elements' (Multus fails them at ADD)
	ReasonBadAnnotation         = Reason("bad-annotation")         // syntax, names
	// Ignored annotations.
	ReasonNPWGOff           = Reason("npwg-annotation-off")
	ReasonNamespaceFiltered = Reason("namespace-filtered") // nri.conf namespaces.include/exclude
	ReasonOptedOut          = Reason("opted-out")          // an empty annotation
	ReasonHostNetwork       = Reason("host-network")
	// Attached differently.
	ReasonInterfaceName = Reason("interface-name")
	ReasonDefaultRoute  = Reason("default-route") // Multus also removes default routes nri-cni keeps
	ReasonOther         = Reason("other")
)

// classify names the reason of a planning error, by the sentinel or type it
// wraps; the most specific first (a NAD refused for its size is a limit,
// wrapped in ErrBadNAD and a policy Violation).
func classify(err error) Reason {
	var limit *plan.LimitError
	var violation *nadpolicy.Violation
	switch {
	case errors.As(err, &limit):
		return ReasonLimits
	case errors.As(err, &violation):
		if violation.PolicyKey == config.MaxNADConfigBytesKey {
			return ReasonLimits
		}
		return ReasonNADPolicy
	case errors.Is(err, plan.ErrNamespaceNotAllowed):
		return ReasonNamespaceIsolation
	case errors.Is(err, plan.ErrUnsupportedField):
		return ReasonUnsupportedKey
	case errors.Is(err, plan.ErrCapabilityNotAllowed):
		return ReasonCapabilityNotAllowed
	case errors.Is(err, plan.ErrCapabilityNotDeclared):
		return ReasonCapabilityNotDeclared
	case errors.Is(err, plan.ErrCNIArgsNotAllowed):
		return ReasonCNIArgsNotAllowed
	case errors.Is(err, plan.ErrNoSuchNAD):
		return ReasonNoSuchNAD
	case errors.Is(err, plan.ErrBadNAD):
		return ReasonBadNAD
	case errors.Is(err, cni.ErrUnknownNetwork):
		return ReasonUnknownNetwork
	case errors.Is(err, plan.ErrDefaultNetworkAnnotation):
		return ReasonDefaultNetwork
	case errors.Is(err, plan.ErrBothAnnotations):
		return ReasonBothAnnotations
	case errors.Is(err, plan.ErrBadInterface):
		return ReasonBadInterface
	case errors.Is(err, plan.ErrBadAnnotation):
		return ReasonBadAnnotation
	}
	return ReasonOther
}
