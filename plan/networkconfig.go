package plan

// A claim's NetworkConfig (opaque DRA config of driver nri-cni.io), decoded
// strictly. The DeviceClass's config is merged over the claim's key by key,
// so the admin's values win — which holds only if a key means one thing:
// encoding/json matches a member to a field without regard to case, with
// Unicode folding ("cni-argſ", U+017F, fills cni-args), and takes the last
// of a key given twice. So every key here must be written exactly as
// documented, once; anything else is refused with the key named, and only
// then does the (folding) field decoder see the config.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// The NetworkConfig keys whose values are checked member by member (the
// rest of npwgKeys' networkConfig keys go to the field decoder as they are).
const (
	ncPortMappings = "portMappings"
	ncBandwidth    = "bandwidth"
	ncCNIArgs      = "cni-args"
)

// The keys of the objects inside those values that are decoded into
// fields: bandwidth, and each element of portMappings.
var (
	bandwidthKeys   = []string{"ingressRate", "ingressBurst", "egressRate", "egressBurst"}
	portMappingKeys = []string{"hostPort", "containerPort", "protocol", "hostIP"}
)

// refusedKeys are keys of the NPWG selection element (or near it) that a
// NetworkConfig refuses, each with its reason; unsupported ones wrap
// ErrUnsupportedField.
var refusedKeys = map[string]struct {
	why         string
	unsupported bool
}{
	"name":                {why: "the network is the allocated device's (select it with the request's selectors)"},
	"namespace":           {why: "the network is the allocated device's (select it with the request's selectors)"},
	"interfaceRequest":    {why: `the NPWG annotation's old name for "interface": write "interface"`},
	KeyIPAMClaimReference: {why: `no IPAMClaim support (ask for addresses with "ips")`, unsupported: true},
	"infiniband-guid":     {why: "no InfiniBand support", unsupported: true},
}

// member is one member of a JSON object, as written.
type member struct {
	key   string
	value json.RawMessage
}

// objectMembers returns the members of the JSON object data in document
// order. Not an object, a key given twice (compared exactly) and anything
// after the object are errors.
func objectMembers(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		if err == nil {
			err = fmt.Errorf("starts with %v", t)
		}
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		key, _ := t.(string) // a member starts with its key: the decoder says so
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("not a JSON object: key %q: %w", key, err)
		}
		if seen[key] {
			return nil, fmt.Errorf("key %q given twice", key)
		}
		seen[key] = true
		out = append(out, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not a JSON object: data after it")
	}
	return out, nil
}

// checkExactKeys checks that every member of the object at data (where
// names it) is one of known, written exactly, once. Anything but an object
// is left to the field decoder.
func checkExactKeys(where string, data json.RawMessage, known []string) error {
	if !isObject(data) {
		return nil
	}
	ms, err := objectMembers(data)
	if err != nil {
		return fmt.Errorf("%q: %w", where, err)
	}
	for _, m := range ms {
		if !slices.Contains(known, m.key) {
			return fmt.Errorf("%q: %w", where, keyError(m.key, known))
		}
	}
	return nil
}

func isObject(data json.RawMessage) bool {
	d := bytes.TrimLeft(data, " \t\r\n")
	return len(d) > 0 && d[0] == '{'
}

// keyError explains why key is not one of known: another spelling of one
// of known or of also (case, Unicode folding), or no key at all.
func keyError(key string, known []string, also ...string) error {
	for _, k := range slices.Concat(known, also) {
		if strings.EqualFold(key, k) {
			return fmt.Errorf("key %q is not %q: keys match exactly (letter case and Unicode look-alikes are not the same key)", key, k)
		}
	}
	return fmt.Errorf("key %q is not one of its keys (%s)", key, strings.Join(known, ", "))
}

// decodeNetworkConfig checks one config, at most maxBytes: the type, every
// key exactly as documented and once (also inside bandwidth and
// portMappings, and cni-args' own keys once each), each value as the NPWG
// annotation's. It returns its members without apiVersion and kind.
func decodeNetworkConfig(raw []byte, maxBytes int) (map[string]json.RawMessage, error) {
	if len(raw) > maxBytes {
		return nil, fmt.Errorf("%d bytes, more than %d (limits.maxAnnotationBytes)", len(raw), maxBytes)
	}
	ms, err := objectMembers(raw)
	if err != nil {
		return nil, err
	}
	keys := make(map[string]json.RawMessage, len(ms))
	var apiVersion, kind string
	for _, m := range ms {
		switch m.key {
		case "apiVersion":
			_ = json.Unmarshal(m.value, &apiVersion)
			continue
		case "kind":
			_ = json.Unmarshal(m.value, &kind)
			continue
		}
		if err := checkNetworkConfigKey(m); err != nil {
			return nil, err
		}
		keys[m.key] = m.value
	}
	if apiVersion != NetworkConfigAPIVersion || kind != NetworkConfigKind {
		return nil, fmt.Errorf("apiVersion %q kind %q: want apiVersion %q, kind %q", apiVersion, kind,
			NetworkConfigAPIVersion, NetworkConfigKind)
	}
	// Each config alone is a valid element: errors name the config they
	// are in, not the merge.
	if _, err := networkSelection(keys); err != nil {
		return nil, err
	}
	return keys, nil
}

// checkNetworkConfigKey judges one member of a NetworkConfig.
func checkNetworkConfigKey(m member) error {
	switch m.key {
	case ncBandwidth:
		return checkExactKeys(ncBandwidth, m.value, bandwidthKeys)
	case ncPortMappings:
		var list []json.RawMessage
		if json.Unmarshal(m.value, &list) != nil {
			return nil // not a list: the field decoder says so
		}
		for i, e := range list {
			if err := checkExactKeys(fmt.Sprintf("%s[%d]", ncPortMappings, i), e, portMappingKeys); err != nil {
				return err
			}
		}
		return nil
	case ncCNIArgs:
		if isObject(m.value) {
			if _, err := objectMembers(m.value); err != nil {
				return fmt.Errorf("%q: %w", ncCNIArgs, err)
			}
		}
		return nil
	}
	if slices.Contains(networkConfigKeys, m.key) {
		return nil
	}
	// A NetworkConfig is nri-cni's own API, not the NPWG annotation that
	// other implementations read too: what the annotation ignores (the
	// spec's rule for shared input) is refused here, like any key nri-cni
	// does not implement.
	if r, ok := refusedKeys[m.key]; ok {
		if r.unsupported {
			return fmt.Errorf("key %q %w: %s", m.key, ErrUnsupportedField, r.why)
		}
		return fmt.Errorf("key %q: %s", m.key, r.why)
	}
	if extensionKey(m.key) {
		return fmt.Errorf("key %q: a NetworkConfig takes no extension keys (reverse domain name notation is for the NPWG annotation)", m.key)
	}
	return keyError(m.key, networkConfigKeys, slices.Concat([]string{"apiVersion", "kind"}, slices.Sorted(maps.Keys(refusedKeys)))...)
}

// networkSelection decodes checked members (exact keys, each once) into a
// selection, with the annotation's rules for each value.
func networkSelection(keys map[string]json.RawMessage) (NetworkSelection, error) {
	data, err := json.Marshal(keys)
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
	merged := map[string]json.RawMessage{}
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
	for _, c := range order {
		keys, err := decodeNetworkConfig(c.Raw, maxBytes)
		if err != nil {
			return NetworkSelection{}, fmt.Errorf("%s: %w: %s: %w", where, ErrBadClaimConfig, source(c), err)
		}
		maps.Copy(merged, keys)
	}
	if len(merged) == 0 {
		return NetworkSelection{}, nil
	}
	sel, err := networkSelection(merged)
	if err == nil && sel.Interface != "" && !usableIfname(sel.Interface) {
		err = fmt.Errorf("\"interface\" %q is not a usable interface name", sel.Interface)
	}
	if err != nil {
		return NetworkSelection{}, fmt.Errorf("%s: %w: %w", where, ErrBadClaimConfig, err)
	}
	return sel, nil
}
