// Package v1alpha1 is nri-cni's API group nri-cni.io, version v1alpha1:
// NetworkConfig, the opaque config a ResourceClaim (or its DeviceClass)
// gives a device of driver nri-cni.io.
//
// The package owns the config's shape: its keys, written exactly and once,
// their types, apiVersion and kind, and how the configs of one request
// merge. What a value means (an address, a MAC, an interface name) is
// judged by plan/ with the NPWG annotation's rules, the same code for both.
// Pure: no I/O.
package v1alpha1

import (
	"encoding/json"
	"errors"
)

// The group, version and kind of a NetworkConfig.
const (
	GroupName         = "nri-cni.io"
	Version           = "v1alpha1"
	APIVersion        = GroupName + "/" + Version
	NetworkConfigKind = "NetworkConfig"
)

// ErrUnsupported: a key of the NPWG selection element that nri-cni does
// not implement; the pod fails rather than starting without it.
var ErrUnsupported = errors.New("not supported by nri-cni")

// NetworkConfig is the opaque config of a device of driver nri-cni.io:
// the keys of an NPWG selection element but the network's name and
// namespace (the allocated device is the network). Every key is optional;
// the order of the fields is the order errors list them in.
type NetworkConfig struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`

	// IPs are the interface's addresses (runtimeConfig.ips).
	IPs Opt[[]string] `json:"ips,omitzero"`
	// MAC is the interface's MAC address (runtimeConfig.mac).
	MAC Opt[string] `json:"mac,omitzero"`
	// Interface is the interface's name in the pod.
	Interface Opt[string] `json:"interface,omitzero"`
	// CNIArgs are the plugins' args.cni, each value as written.
	CNIArgs Opt[map[string]json.RawMessage] `json:"cni-args,omitzero"`
	// PortMappings are runtimeConfig.portMappings.
	PortMappings Opt[[]PortMapping] `json:"portMappings,omitzero"`
	// Bandwidth is runtimeConfig.bandwidth.
	Bandwidth Opt[Bandwidth] `json:"bandwidth,omitzero"`
	// DefaultRoute are the gateways of the pod's default routes through
	// the interface.
	DefaultRoute Opt[[]string] `json:"default-route,omitzero"`
}

// PortMapping is one element of portMappings.
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
	HostIP        string `json:"hostIP,omitempty"`
}

// Bandwidth is the bandwidth key's value: each rate or burst only if set.
type Bandwidth struct {
	IngressRate  *int64 `json:"ingressRate,omitempty"`
	IngressBurst *int64 `json:"ingressBurst,omitempty"`
	EgressRate   *int64 `json:"egressRate,omitempty"`
	EgressBurst  *int64 `json:"egressBurst,omitempty"`
}

// Opt is a key's value with whether the config gave the key: absent,
// null (which takes the value of a config merged under it away) or a
// value.
type Opt[T any] struct {
	Set   bool // the key was given (also as null)
	Null  bool // the key was given as null
	Value T
}

// Some is a key given with value v.
func Some[T any](v T) Opt[T] { return Opt[T]{Set: true, Value: v} }

// UnmarshalJSON implements json.Unmarshaler.
func (o *Opt[T]) UnmarshalJSON(data []byte) error {
	*o = Opt[T]{Set: true}
	if string(data) == "null" {
		o.Null = true
		return nil
	}
	return json.Unmarshal(data, &o.Value)
}

// MarshalJSON implements json.Marshaler: the value (null when given as
// null; omitted altogether when absent, with omitzero).
func (o Opt[T]) MarshalJSON() ([]byte, error) {
	if !o.Set || o.Null {
		return []byte("null"), nil
	}
	return json.Marshal(o.Value)
}

// IsZero reports whether the key carries no value (absent or null), for
// omitzero.
func (o Opt[T]) IsZero() bool { return !o.Set || o.Null }

// over is o with the key of top over it: top's when top gives the key
// (also as null), o's otherwise.
func over[T any](o, top Opt[T]) Opt[T] {
	if top.Set {
		return top
	}
	return o
}

// Merge merges configs key by key, each over the ones before it: a later
// config's key wins, also when it is null (the key is then unset). A
// DeviceClass's configs go last, so the admin's values win over the
// claim's. The result has no apiVersion or kind.
func Merge(configs ...NetworkConfig) NetworkConfig {
	var m NetworkConfig
	for _, c := range configs {
		m.IPs = over(m.IPs, c.IPs)
		m.MAC = over(m.MAC, c.MAC)
		m.Interface = over(m.Interface, c.Interface)
		m.CNIArgs = over(m.CNIArgs, c.CNIArgs)
		m.PortMappings = over(m.PortMappings, c.PortMappings)
		m.Bandwidth = over(m.Bandwidth, c.Bandwidth)
		m.DefaultRoute = over(m.DefaultRoute, c.DefaultRoute)
	}
	return m
}
