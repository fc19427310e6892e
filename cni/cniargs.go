package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/containernetworking/cni/libcni"
)

// ErrArgsConflict: a pod's cni-args set a key the network's own config
// already sets in args.cni (the admin's value is never overridden).
var ErrArgsConflict = errors.New("cni-args key already set by the network's config")

// Declares reports whether some plugin of n declares capability c
// ("capabilities": {"<c>": true}): only those receive it from libcni.
func (n *Network) Declares(c string) bool {
	for _, p := range n.List.Plugins {
		if p.Network != nil && p.Network.Capabilities[c] {
			return true
		}
	}
	return false
}

// WithCNIArgs returns a copy of n whose every plugin config carries args in
// "args": {"cni": {...}} (the CNI conventions' place for them), merged with
// what the config has there already. n itself is never modified: it is
// shared (the loaded or cached network). libcni caches the copy's bytes at
// ADD, so the DEL of that attachment sees the same args. A key the config
// already sets is ErrArgsConflict. No args returns n.
func (n *Network) WithCNIArgs(args map[string]any) (*Network, error) {
	if len(args) == 0 {
		return n, nil
	}
	var list map[string]any
	if err := decodeNumbers(n.List.Bytes, &list); err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	plugins, ok := list["plugins"].([]any)
	if !ok {
		return nil, fmt.Errorf("network %q: config has no plugins list", n.Name)
	}
	for i, p := range plugins {
		conf, ok := p.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("network %q: plugin %d is not an object", n.Name, i)
		}
		merged, err := mergeCNIArgs(conf["args"], args)
		if err != nil {
			return nil, fmt.Errorf("network %q plugin %d (type %v): %w", n.Name, i, conf["type"], err)
		}
		conf["args"] = merged
	}
	data, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	copied, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("network %q with cni-args: %w", n.Name, err)
	}
	return n.derived(copied), nil
}

// mergeCNIArgs returns existing (a plugin config's "args") with args added
// under "cni".
func mergeCNIArgs(existing any, args map[string]any) (map[string]any, error) {
	out := map[string]any{}
	if existing != nil {
		m, ok := existing.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("its \"args\" is not an object")
		}
		maps.Copy(out, m)
	}
	cniArgs := map[string]any{}
	if c, ok := out["cni"]; ok {
		m, ok := c.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("its \"args.cni\" is not an object")
		}
		maps.Copy(cniArgs, m)
	}
	for _, k := range slices.Sorted(maps.Keys(args)) {
		if _, set := cniArgs[k]; set {
			return nil, fmt.Errorf("%w: %q", ErrArgsConflict, k)
		}
		cniArgs[k] = args[k]
	}
	out["cni"] = cniArgs
	return out, nil
}

// decodeNumbers decodes JSON keeping numbers exact (json.Number), so a
// re-encoded config says what the original said.
func decodeNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}
