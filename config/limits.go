package config

import "fmt"

// Limits bound the work one pod's annotations can make nri-cni do. Pod
// annotations are written by whoever may create a pod (the API server
// accepts 256 KiB of them): without a bound, one pod asking for thousands of
// networks keeps the node's nri-cni busy past the runtime's deadline and
// every other pod waits behind it.
type Limits struct {
	// MaxNetworksPerPod: a pod asking for more networks (nri-cni.io/networks
	// or the NPWG annotation, counted with the defaultNetworks and its DRA
	// claims) fails at once with an error naming this key; nothing is
	// planned, recorded or ADDed.
	MaxNetworksPerPod int `json:"maxNetworksPerPod"`
	// MaxAnnotationBytes: the largest value of an annotation nri-cni reads
	// (the networks annotations, nri-cni.io/ips, mac, port-mappings, the
	// bandwidth annotations). A larger value fails the pod before it is
	// parsed.
	MaxAnnotationBytes int `json:"maxAnnotationBytes"`
}

// Defaults of Limits. 32 networks is more than any pod has been seen to
// ask for (telco pods with SR-IOV use a handful to a dozen) and ADDs in well
// under the runtime's 2 s NRI deadline with the reference plugins (≈ 18 ms
// per bridge network here); 16 KiB holds 32 NPWG elements with a few
// hundred bytes of keys each.
const (
	DefaultMaxNetworksPerPod  = 32
	DefaultMaxAnnotationBytes = 16 << 10
	// maxAnnotationBytesLimit is what the API server allows for all of a
	// pod's annotations together.
	maxAnnotationBytesLimit = 256 << 10
)

// Limit keys, for error messages.
const (
	MaxNetworksPerPodKey  = "limits.maxNetworksPerPod"
	MaxAnnotationBytesKey = "limits.maxAnnotationBytes"
)

// DefaultLimits returns the limits used when the file sets none.
func DefaultLimits() Limits {
	return Limits{MaxNetworksPerPod: DefaultMaxNetworksPerPod, MaxAnnotationBytes: DefaultMaxAnnotationBytes}
}

func (l Limits) validate() error {
	if l.MaxNetworksPerPod < 1 || l.MaxNetworksPerPod > maxNetworks {
		return fmt.Errorf("%w: %s: %d must be between 1 and %d (interface names are <ifnamePrefix><1-%d>)",
			ErrInvalid, MaxNetworksPerPodKey, l.MaxNetworksPerPod, maxNetworks, maxNetworks)
	}
	if l.MaxAnnotationBytes < 256 || l.MaxAnnotationBytes > maxAnnotationBytesLimit {
		return fmt.Errorf("%w: %s: %d must be between 256 and %d", ErrInvalid, MaxAnnotationBytesKey,
			l.MaxAnnotationBytes, maxAnnotationBytesLimit)
	}
	return nil
}
