package plan

// A claim's NetworkConfig (opaque DRA config of driver nri-cni.io): its
// shape (keys, types, apiVersion and kind, the merge) is apis/v1alpha1's;
// what each value means is judged here with the NPWG annotation's rules,
// the same code for both.

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nri-cni/nri-cni/apis/v1alpha1"
)

// networkSelection judges a decoded config's values with the annotation's
// rules, as the selection element they make.
func networkSelection(c v1alpha1.NetworkConfig) (NetworkSelection, error) {
	c.APIVersion, c.Kind = "", ""
	data, err := json.Marshal(c)
	if err != nil {
		return NetworkSelection{}, err
	}
	e, err := decodeElement(data)
	if err != nil {
		return NetworkSelection{}, err
	}
	return e.selection()
}

// ParseNetworkConfig validates each config (apiVersion nri-cni.io/v1alpha1,
// kind NetworkConfig, the keys of an NPWG selection element but the
// network's name and namespace: the device is the network), each at most
// maxBytes, and merges them key by key: the claim's in order, then the
// class's over them (the admin's config wins; a class that sets a key to
// null takes it away from the claim). where names the claim's request in
// errors. No config gives the zero NetworkSelection.
func ParseNetworkConfig(where string, configs []ClaimConfig, maxBytes int) (NetworkSelection, error) {
	if len(configs) == 0 {
		return NetworkSelection{}, nil
	}
	order := slices.Clone(configs)
	slices.SortStableFunc(order, func(a, b ClaimConfig) int {
		switch {
		case a.FromClass == b.FromClass:
			return 0
		case b.FromClass:
			return -1
		}
		return 1
	})
	decoded := make([]v1alpha1.NetworkConfig, 0, len(order))
	for _, c := range order {
		nc, err := v1alpha1.Decode(c.Raw, maxBytes)
		if err == nil {
			// Each config alone is a valid element: errors name the
			// config they are in, not the merge.
			_, err = networkSelection(nc)
		}
		if err != nil {
			return NetworkSelection{}, fmt.Errorf("%s: %w: %s: %w", where, ErrBadClaimConfig, source(c), err)
		}
		decoded = append(decoded, nc)
	}
	sel, err := networkSelection(v1alpha1.Merge(decoded...))
	if err == nil && sel.Interface != "" && !usableIfname(sel.Interface) {
		err = fmt.Errorf("\"interface\" %q is not a usable interface name", sel.Interface)
	}
	if err != nil {
		return NetworkSelection{}, fmt.Errorf("%s: %w: %w", where, ErrBadClaimConfig, err)
	}
	return sel, nil
}
