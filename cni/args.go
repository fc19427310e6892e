package cni

import (
	"errors"
	"fmt"
	"strings"
)

// PodIdentity is what CNI_ARGS tells plugins about the pod.
type PodIdentity struct {
	Namespace string
	Name      string
	InfraID   string // K8S_POD_INFRA_CONTAINER_ID: the sandbox id
	UID       string
}

// ErrBadArg marks a value that cannot travel in CNI_ARGS.
var ErrBadArg = errors.New("invalid CNI_ARGS value")

// maxArgLen bounds one value: Kubernetes names are at most 253 characters.
const maxArgLen = 253

// Args returns the CNI_ARGS pairs the kubelet convention defines:
// IgnoreUnknown=1;K8S_POD_NAMESPACE;K8S_POD_NAME;K8S_POD_INFRA_CONTAINER_ID;K8S_POD_UID.
// CNI_ARGS is "k=v;k=v", so a value with ';' or '=' could smuggle in another
// key: such values, control characters and over-long values are refused.
func (p PodIdentity) Args() ([][2]string, error) {
	pairs := [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", p.Namespace},
		{"K8S_POD_NAME", p.Name},
		{"K8S_POD_INFRA_CONTAINER_ID", p.InfraID},
		{"K8S_POD_UID", p.UID},
	}
	for _, kv := range pairs[1:] {
		if err := checkArg(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	return pairs, nil
}

func checkArg(key, v string) error {
	if len(v) > maxArgLen {
		return fmt.Errorf("%w: %s is %d characters long (max %d)", ErrBadArg, key, len(v), maxArgLen)
	}
	if i := strings.IndexFunc(v, func(r rune) bool {
		return r == ';' || r == '=' || r < 0x20 || r == 0x7f
	}); i >= 0 {
		return fmt.Errorf("%w: %s %q has a forbidden character at offset %d", ErrBadArg, key, v, i)
	}
	return nil
}
