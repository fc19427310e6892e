package v1alpha1

// Decoding is strict. A DeviceClass's config is merged over the claim's
// key by key, so the admin's values win, which holds only if a key means
// one thing: encoding/json matches a member to a field without regard to
// case, with Unicode folding ("cni-argſ", U+017F, fills cni-args), and
// takes the last of a key given twice. So every key must be written
// exactly as its json tag, once; anything else is refused with the key
// named, and only then does the (folding) field decoder see the config.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Keys are a NetworkConfig's keys besides apiVersion and kind, in the
// order of its fields.
func Keys() []string { return slices.Clone(configKeys) }

var (
	configKeys      = jsonKeys(reflect.TypeFor[NetworkConfig](), "apiVersion", "kind")
	bandwidthKeys   = jsonKeys(reflect.TypeFor[Bandwidth]())
	portMappingKeys = jsonKeys(reflect.TypeFor[PortMapping]())
)

// jsonKeys are the json tags' names of t's fields, but skip.
func jsonKeys(t reflect.Type, skip ...string) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !slices.Contains(skip, name) {
			out = append(out, name)
		}
	}
	return out
}

// refusedKeys are keys of the NPWG selection element (or near it) that a
// NetworkConfig refuses, each with its reason; unsupported ones wrap
// ErrUnsupported.
var refusedKeys = map[string]struct {
	why         string
	unsupported bool
}{
	"name":                 {why: "the network is the allocated device's (select it with the request's selectors)"},
	"namespace":            {why: "the network is the allocated device's (select it with the request's selectors)"},
	"interfaceRequest":     {why: `the NPWG annotation's old name for "interface": write "interface"`},
	"ipam-claim-reference": {why: `no IPAMClaim support (ask for addresses with "ips")`, unsupported: true},
	"infiniband-guid":      {why: "no InfiniBand support", unsupported: true},
}

// Decode decodes one config of at most maxBytes: an object whose every
// key is one of Keys, apiVersion or kind, written exactly and once (also
// inside bandwidth and each portMappings element, and cni-args' own keys
// once each), of apiVersion APIVersion and kind NetworkConfigKind, each
// value of its field's type.
func Decode(raw []byte, maxBytes int) (NetworkConfig, error) {
	if len(raw) > maxBytes {
		return NetworkConfig{}, fmt.Errorf("%d bytes, more than %d (limits.maxAnnotationBytes)", len(raw), maxBytes)
	}
	ms, err := objectMembers(raw)
	if err != nil {
		return NetworkConfig{}, err
	}
	var c NetworkConfig
	v := reflect.ValueOf(&c).Elem()
	for _, m := range ms {
		if m.key != "apiVersion" && m.key != "kind" {
			if err := checkKey(m); err != nil {
				return NetworkConfig{}, err
			}
		}
		if err := json.Unmarshal(m.value, v.FieldByIndex(fieldIndex[m.key]).Addr().Interface()); err != nil {
			return NetworkConfig{}, fmt.Errorf("%q: %w", m.key, err)
		}
	}
	if c.APIVersion != APIVersion || c.Kind != NetworkConfigKind {
		return NetworkConfig{}, fmt.Errorf("apiVersion %q kind %q: want apiVersion %q, kind %q", c.APIVersion, c.Kind,
			APIVersion, NetworkConfigKind)
	}
	return c, nil
}

// fieldIndex is the index of each key's field in NetworkConfig (its json
// tags), worked out once.
var fieldIndex = func() map[string][]int {
	out := map[string][]int{}
	for f := range reflect.TypeFor[NetworkConfig]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out[name] = f.Index
	}
	return out
}()

// checkKey judges one member of a NetworkConfig.
func checkKey(m member) error {
	switch m.key {
	case "bandwidth":
		return checkExactKeys(m.key, m.value, bandwidthKeys)
	case "portMappings":
		var list []json.RawMessage
		if json.Unmarshal(m.value, &list) != nil {
			return nil // not a list: the field decoder says so
		}
		for i, e := range list {
			if err := checkExactKeys(fmt.Sprintf("%s[%d]", m.key, i), e, portMappingKeys); err != nil {
				return err
			}
		}
		return nil
	case "cni-args":
		if isObject(m.value) {
			if _, err := objectMembers(m.value); err != nil {
				return fmt.Errorf("%q: %w", m.key, err)
			}
		}
		return nil
	}
	if slices.Contains(configKeys, m.key) {
		return nil
	}
	// A NetworkConfig is nri-cni's own API, not the NPWG annotation that
	// other implementations read too: what the annotation ignores (the
	// spec's rule for shared input) is refused here, like any key nri-cni
	// does not implement.
	if r, ok := refusedKeys[m.key]; ok {
		if r.unsupported {
			return fmt.Errorf("key %q %w: %s", m.key, ErrUnsupported, r.why)
		}
		return fmt.Errorf("key %q: %s", m.key, r.why)
	}
	if strings.Contains(m.key, ".") {
		return fmt.Errorf("key %q: a NetworkConfig takes no extension keys (reverse domain name notation is for the NPWG annotation)", m.key)
	}
	return keyError(m.key, configKeys, slices.Concat([]string{"apiVersion", "kind"}, slices.Sorted(maps.Keys(refusedKeys)))...)
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
