package config

import (
	"fmt"
	"path/filepath"
)

// DRAConfig is the DRA driver (kubernetes.dra): networks as ResourceClaims
// of driver nri-cni.io. Off unless enabled.
type DRAConfig struct {
	// Enabled registers the driver with the kubelet and publishes this
	// node's ResourceSlice.
	Enabled bool `json:"enabled"`
	// KubeletDir is the kubelet's root directory: the driver's socket goes
	// in <kubeletDir>/plugins/nri-cni.io, its registration in
	// <kubeletDir>/plugins_registry (empty: /var/lib/kubelet).
	KubeletDir string `json:"kubeletDir"`
	// NodeNetworks are the config dir networks published as devices (any
	// namespace's claim may get them); empty means every loaded one. Each
	// must be a CNI network name.
	NodeNetworks []string `json:"nodeNetworks"`
	// NADs publishes the NetworkAttachmentDefinitions kubernetes.nadPolicy
	// allows (a claim may get those of its namespace and of
	// kubernetes.sharedNamespaces). Default true.
	NADs *bool `json:"nads"`
	// Sharing is how one network serves many claims: "auto" (default):
	// one device per network that allows multiple allocations (KEP-5075)
	// where the API server keeps that field, else slots; "multiple"; or
	// "slots": devices <network>-<n>, one claim each.
	Sharing string `json:"sharing"`
	// Slots bounds the slots of a network (fewer when its host-local
	// ranges hold fewer addresses). Default 16.
	Slots int `json:"slots"`
	// MaxDevices bounds the published devices (NADs are tenant input):
	// the networks past it are not published, and said so. Default 512.
	MaxDevices int `json:"maxDevices"`
	// MaxDevicesPerNamespace bounds the devices of one namespace's NADs:
	// the NADs share MaxDevices fairly among their namespaces (the next
	// device goes to the namespace with the fewest), each at most this
	// many, so no namespace's NADs push another's off the node. Default
	// 128; at most MaxDevices.
	MaxDevicesPerNamespace int `json:"maxDevicesPerNamespace"`
	// DeviceClasses says which DeviceClasses a namespace's claims may use
	// (draclasses.go); nil: any.
	DeviceClasses *DeviceClassRule `json:"deviceClasses"`
}

// DRA defaults and bounds.
const (
	DefaultKubeletDir    = "/var/lib/kubelet"
	DefaultDRASlots      = 16
	DefaultDRAMaxDevices = 512
	maxDRASlots          = 128
	maxDRADevices        = 4096
	SharingAuto          = "auto"
	SharingMultiple      = "multiple"
	SharingSlots         = "slots"

	// DefaultDRAMaxDevicesPerNamespace: one namespace's share by default,
	// a quarter of the default maxDevices (8 NADs of 16 slots, or 128
	// shared devices).
	DefaultDRAMaxDevicesPerNamespace = 128
)

// DRAOn reports whether the DRA driver runs.
func (k *KubernetesConfig) DRAOn() bool { return k != nil && k.DRA != nil && k.DRA.Enabled }

// KubeletRoot returns KubeletDir or its default.
func (d *DRAConfig) KubeletRoot() string {
	if d == nil || d.KubeletDir == "" {
		return DefaultKubeletDir
	}
	return d.KubeletDir
}

// PublishNADs reports whether NADs are published.
func (d *DRAConfig) PublishNADs() bool { return d == nil || d.NADs == nil || *d.NADs }

// SharingMode returns Sharing or its default.
func (d *DRAConfig) SharingMode() string {
	if d == nil || d.Sharing == "" {
		return SharingAuto
	}
	return d.Sharing
}

// SlotCount returns Slots or its default.
func (d *DRAConfig) SlotCount() int {
	if d == nil || d.Slots == 0 {
		return DefaultDRASlots
	}
	return d.Slots
}

// DeviceLimit returns MaxDevices or its default.
func (d *DRAConfig) DeviceLimit() int {
	if d == nil || d.MaxDevices == 0 {
		return DefaultDRAMaxDevices
	}
	return d.MaxDevices
}

// DevicesPerNamespace returns MaxDevicesPerNamespace or its default, at
// most DeviceLimit.
func (d *DRAConfig) DevicesPerNamespace() int {
	n := DefaultDRAMaxDevicesPerNamespace
	if d != nil && d.MaxDevicesPerNamespace != 0 {
		n = d.MaxDevicesPerNamespace
	}
	return min(n, d.DeviceLimit())
}

func (d *DRAConfig) validate() error {
	if d == nil {
		return nil
	}
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: kubernetes.dra.%s: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
	}
	if d.KubeletDir != "" && !filepath.IsAbs(d.KubeletDir) {
		return bad("kubeletDir", "must be an absolute path, got %q", d.KubeletDir)
	}
	if err := networkNames("kubernetes.dra.nodeNetworks", d.NodeNetworks); err != nil {
		return err
	}
	switch d.Sharing {
	case "", SharingAuto, SharingMultiple, SharingSlots:
	default:
		return bad("sharing", "%q: want %s, %s or %s", d.Sharing, SharingAuto, SharingMultiple, SharingSlots)
	}
	if d.Slots < 0 || d.Slots > maxDRASlots {
		return bad("slots", "%d must be between 1 and %d (0: %d)", d.Slots, maxDRASlots, DefaultDRASlots)
	}
	if d.MaxDevices < 0 || d.MaxDevices > maxDRADevices {
		return bad("maxDevices", "%d must be between 1 and %d (0: %d)", d.MaxDevices, maxDRADevices, DefaultDRAMaxDevices)
	}
	if d.MaxDevicesPerNamespace < 0 || d.MaxDevicesPerNamespace > maxDRADevices {
		return bad("maxDevicesPerNamespace", "%d must be between 1 and %d (0: %d)", d.MaxDevicesPerNamespace, maxDRADevices,
			DefaultDRAMaxDevicesPerNamespace)
	}
	if err := d.DeviceClasses.validate(); err != nil {
		return err
	}
	return nil
}
