package plan

// The node's verdict on one NetworkAttachmentDefinition's spec.config, shared
// by every NADSource (kube's informer cache, migrate-check's listed NADs) so
// that a NAD is judged the same way wherever nri-cni looks at it.

import (
	"fmt"
	"strings"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/nadpolicy"
)

// ParseNADConfig turns a NAD's spec.config into a Network: its size first
// (maxBytes, kubernetes.maxNADConfigBytes), then the NAD policy of the
// object's namespace, then cni.Parse. An empty (all whitespace) config is
// the confDir network of the object's name, written by the admin and not
// judged: a Network with only Name set (NADSource's contract). A refusal
// names the NAD, the key and the policy key, and wraps ErrBadNAD (and a
// *nadpolicy.Violation for the size and the policy).
func ParseNADConfig(ref NADRef, specConfig string, policy *nadpolicy.Policy, maxBytes int) (*cni.Network, error) {
	raw := []byte(specConfig)
	if err := nadpolicy.CheckSize(raw, maxBytes); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBadNAD, ref, err)
	}
	if strings.TrimSpace(specConfig) == "" {
		return &cni.Network{Name: ref.Name}, nil
	}
	if err := policy.Check(ref.Namespace, raw); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBadNAD, ref, err)
	}
	n, err := cni.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w %s: spec.config: %w", ErrBadNAD, ref, err)
	}
	n.File = "NetworkAttachmentDefinition " + ref.String()
	return n, nil
}
