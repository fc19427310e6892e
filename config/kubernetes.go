package config

import (
	"fmt"
	"path/filepath"
)

// KubernetesConfig is the `kubernetes:` section of nri.conf. Its presence
// turns Kubernetes mode on: NetworkAttachmentDefinitions from an informer
// cache, network-status written back to pods, Warning Events for failed
// attaches. Without it nri-cni has no API client at all.
type KubernetesConfig struct {
	// Kubeconfig is the path of a kubeconfig file; empty means in-cluster
	// (the ServiceAccount token, re-read by client-go when it rotates).
	Kubeconfig string `json:"kubeconfig"`
	// NodeName is this node's name (Events' source host); empty means the
	// NODE_NAME environment variable (the downward API in the DaemonSet).
	NodeName string `json:"nodeName"`
	// SharedNamespaces are namespaces whose NetworkAttachmentDefinitions
	// pods of every namespace may use. A pod may always use its own
	// namespace's.
	SharedNamespaces []string `json:"sharedNamespaces"`
	// AdminNamespaces are the namespaces where only the cluster's admins
	// create and change NetworkAttachmentDefinitions. A defaultNetworks
	// entry may name a NAD only in one of them: a default NAD is attached
	// to every pod of the node, so whoever writes it chooses a network of
	// every pod (and can fail every pod by deleting it). nil: the default,
	// [kube-system] (Multus's multusNamespace); []: none (defaultNetworks
	// then names confDir networks only).
	AdminNamespaces []string `json:"adminNamespaces"`
	// NPWGAnnotation makes nri-cni honour the NPWG annotation
	// k8s.v1.cni.cncf.io/networks. Off by default: on a node where Multus
	// also runs, both would attach the same networks.
	NPWGAnnotation bool `json:"npwgAnnotation"`
	// DefaultNetworkName names the runtime's own network (eth0) in the
	// network-status annotation's first, default entry.
	DefaultNetworkName string `json:"defaultNetworkName"`
	// PrimaryConfDir is the runtime's own CNI config dir. When its first
	// config is Multus, Multus owns the NPWG annotation and network-status
	// on this node and nri-cni leaves both alone (empty: /etc/cni/net.d).
	PrimaryConfDir string `json:"primaryConfDir"`
	// Hotplug: watch the pods of this node and attach or detach networks
	// when a running pod's networks annotation changes.
	Hotplug bool `json:"hotplug"`
	// NADPolicy is what NetworkAttachmentDefinitions may reach on the node
	// (nadpolicy.go); nil means the fail-closed DefaultNADPolicy().
	NADPolicy *NADPolicy `json:"nadPolicy"`
	// MaxNADConfigBytes: a NAD whose spec.config is larger fails every pod
	// that names it, before it is parsed (0: DefaultMaxNADConfigBytes).
	MaxNADConfigBytes int `json:"maxNADConfigBytes"`
	// MaxNADCacheBytes bounds what this node's cache of every NAD in the
	// cluster holds, in bytes as NADCost counts them; past it the NADs of
	// the namespaces holding the most are dropped, fairly (0:
	// DefaultMaxNADCacheBytes).
	MaxNADCacheBytes int `json:"maxNADCacheBytes"`
	// DRA is the DRA driver (dra.go); nil: off.
	DRA *DRAConfig `json:"dra"`
	// PodResourcesSocket is the kubelet's PodResources API socket (a host
	// path; resolved inside pluginRoot when that is set), read for the
	// devices the kubelet allocated to a pod when one of its networks has a
	// device plugin resource (k8s.v1.cni.cncf.io/resourceName); empty:
	// DefaultPodResourcesSocket.
	PodResourcesSocket string `json:"podResourcesSocket"`
	// DeviceInfoDir is the NPWG device-info directory (a host path; resolved
	// inside pluginRoot when that is set): device plugins' files are read
	// there and each device-backed attachment's is written; empty:
	// DefaultDeviceInfoDir.
	DeviceInfoDir string `json:"deviceInfoDir"`
	// MultiNetworkPolicy is MultiNetworkPolicy enforcement
	// (multinetworkpolicy.go); nil: off.
	MultiNetworkPolicy *MultiNetworkPolicyConfig `json:"multiNetworkPolicy"`
}

// Defaults of the device keys.
const (
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	DefaultDeviceInfoDir      = "/var/run/k8s.cni.cncf.io/devinfo"
)

// PodResources returns PodResourcesSocket or its default (a host path).
func (k *KubernetesConfig) PodResources() string {
	if k == nil || k.PodResourcesSocket == "" {
		return DefaultPodResourcesSocket
	}
	return k.PodResourcesSocket
}

// DeviceInfo returns DeviceInfoDir or its default (a host path).
func (k *KubernetesConfig) DeviceInfo() string {
	if k == nil || k.DeviceInfoDir == "" {
		return DefaultDeviceInfoDir
	}
	return k.DeviceInfoDir
}

// HotplugOn reports whether networks follow annotation changes.
func (k *KubernetesConfig) HotplugOn() bool { return k != nil && k.Hotplug }

// DefaultPrimaryConfDir is where containerd and CRI-O read their own CNI
// config by default.
const DefaultPrimaryConfDir = "/etc/cni/net.d"

// RuntimeConfDir returns PrimaryConfDir or its default.
func (k *KubernetesConfig) RuntimeConfDir() string {
	if k == nil || k.PrimaryConfDir == "" {
		return DefaultPrimaryConfDir
	}
	return k.PrimaryConfDir
}

// DefaultKubernetesNetworkName is the network-status name of the runtime's
// own network when defaultNetworkName is not set.
const DefaultKubernetesNetworkName = "default"

// PrimaryNetworkName returns DefaultNetworkName or its default.
func (k *KubernetesConfig) PrimaryNetworkName() string {
	if k == nil || k.DefaultNetworkName == "" {
		return DefaultKubernetesNetworkName
	}
	return k.DefaultNetworkName
}

// SharesNamespace reports whether pods of other namespaces may use the
// NetworkAttachmentDefinitions of ns.
func (k *KubernetesConfig) SharesNamespace(ns string) bool {
	if k == nil {
		return false
	}
	for _, s := range k.SharedNamespaces {
		if s == ns {
			return true
		}
	}
	return false
}

// DefaultAdminNamespaces is kubernetes.adminNamespaces when nri.conf sets
// none.
var DefaultAdminNamespaces = []string{"kube-system"}

// Admins returns AdminNamespaces or its default.
func (k *KubernetesConfig) Admins() []string {
	if k == nil || k.AdminNamespaces == nil {
		return DefaultAdminNamespaces
	}
	return k.AdminNamespaces
}

// AdminNamespace reports whether only the cluster's admins write the
// NetworkAttachmentDefinitions of ns (kubernetes.adminNamespaces).
func (k *KubernetesConfig) AdminNamespace(ns string) bool {
	for _, a := range k.Admins() {
		if a == ns {
			return true
		}
	}
	return false
}

// NPWG reports whether the NPWG networks annotation is honoured.
func (k *KubernetesConfig) NPWG() bool { return k != nil && k.NPWGAnnotation }

// validNodeName: a DNS-1123 subdomain, as Kubernetes node names are.
func validNodeName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		edge := i == 0 || i == len(s)-1
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || !edge && (c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

func (k *KubernetesConfig) validate() error {
	if k == nil {
		return nil
	}
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: kubernetes.%s: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
	}
	if k.Kubeconfig != "" && !filepath.IsAbs(k.Kubeconfig) {
		return bad("kubeconfig", "must be an absolute path (or empty: in-cluster), got %q", k.Kubeconfig)
	}
	for key, v := range map[string]string{"primaryConfDir": k.PrimaryConfDir, "podResourcesSocket": k.PodResourcesSocket,
		"deviceInfoDir": k.DeviceInfoDir} {
		if v != "" && !filepath.IsAbs(v) {
			return bad(key, "must be an absolute path, got %q", v)
		}
	}
	if k.NodeName != "" && !validNodeName(k.NodeName) {
		return bad("nodeName", "%q is not a Kubernetes node name", k.NodeName)
	}
	seen := map[string]bool{}
	for i, ns := range k.SharedNamespaces {
		if !validNamespace(ns) {
			return bad(fmt.Sprintf("sharedNamespaces[%d]", i), "%q is not a Kubernetes namespace name", ns)
		}
		if seen[ns] {
			return bad(fmt.Sprintf("sharedNamespaces[%d]", i), "%q listed twice", ns)
		}
		seen[ns] = true
	}
	seen = map[string]bool{}
	for i, ns := range k.AdminNamespaces {
		if !validNamespace(ns) {
			return bad(fmt.Sprintf("adminNamespaces[%d]", i), "%q is not a Kubernetes namespace name", ns)
		}
		if seen[ns] {
			return bad(fmt.Sprintf("adminNamespaces[%d]", i), "%q listed twice", ns)
		}
		seen[ns] = true
	}
	if n := k.DefaultNetworkName; n != "" && !networkNameRe.MatchString(n) {
		return bad("defaultNetworkName", "%q is not a valid network name", n)
	}
	if err := k.DRA.validate(); err != nil {
		return err
	}
	if err := k.MultiNetworkPolicy.validate(); err != nil {
		return err
	}
	return k.validateNAD()
}
