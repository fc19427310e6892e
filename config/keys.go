package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// UnknownKeyError: the file sets a key the configuration does not have. It
// wraps ErrInvalid.
type UnknownKeyError struct {
	// Key is the key with its nesting, e.g. "hook.bogus".
	Key string
	// Allowed are the keys allowed where Key is, in the struct's order.
	Allowed []string
}

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("unknown key %q (allowed: %s)", e.Key, strings.Join(e.Allowed, ", "))
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *UnknownKeyError) Unwrap() error { return ErrInvalid }

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// checkKeys reports the first key of data (YAML or JSON) that into's type
// has no field for, walking nested structs. The allowed keys come from the
// json tags, so they cannot drift from the struct. Syntax and type errors
// are left to the decoder, which reports them.
func checkKeys(data []byte, into any) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil
	}
	var doc any
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil
	}
	return unknownKey(doc, reflect.TypeOf(into), "")
}

func unknownKey(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return nil // decodes itself: its errors are its own
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f, ok := lookupField(fields, k)
			if !ok {
				allowed := make([]string, len(fields))
				for i, f := range fields {
					allowed[i] = f.name
				}
				return &UnknownKeyError{Key: path + k, Allowed: allowed}
			}
			if err := unknownKey(obj[k], f.typ, path+k+"."); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		list, _ := v.([]any)
		for i, e := range list {
			if err := unknownKey(e, t.Elem(), fmt.Sprintf("%s[%d].", strings.TrimSuffix(path, "."), i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		// Map values (e.g. kubernetes.nadPolicy.namespaces.<ns>) are
		// walked in sorted key order, so the key reported is always the same.
		obj, _ := v.(map[string]any)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := unknownKey(obj[k], t.Elem(), path+k+"."); err != nil {
				return err
			}
		}
	}
	return nil
}

type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields lists the keys encoding/json decodes into t, in field order
// (fields of untagged embedded structs are promoted, as encoding/json does).
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
			out = append(out, jsonFields(ft)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		out = append(out, jsonField{name: tag, typ: f.Type})
	}
	return out
}

// lookupField matches a key as encoding/json does: exactly, else ignoring
// case.
func lookupField(fields []jsonField, key string) (jsonField, bool) {
	for _, f := range fields {
		if f.name == key {
			return f, true
		}
	}
	for _, f := range fields {
		if strings.EqualFold(f.name, key) {
			return f, true
		}
	}
	return jsonField{}, false
}

// unmarshalerKey returns the key of the first value of data (in sorted key
// order) that a custom unmarshaler of into's type refuses, or "".
func unmarshalerKey(data []byte, into any) string {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return ""
	}
	var doc any
	if err := json.Unmarshal(js, &doc); err != nil {
		return ""
	}
	return refusedKey(doc, reflect.TypeOf(into), "")
}

func refusedKey(v any, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		raw, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			return strings.TrimSuffix(path, ".")
		}
		return ""
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, _ := v.(map[string]any)
		fields := jsonFields(t)
		for _, k := range sortedKeys(obj) {
			if f, ok := lookupField(fields, k); ok {
				if key := refusedKey(obj[k], f.typ, path+k+"."); key != "" {
					return key
				}
			}
		}
	case reflect.Slice, reflect.Array:
		list, _ := v.([]any)
		for i, e := range list {
			if key := refusedKey(e, t.Elem(), fmt.Sprintf("%s[%d].", strings.TrimSuffix(path, "."), i)); key != "" {
				return key
			}
		}
	case reflect.Map:
		obj, _ := v.(map[string]any)
		for _, k := range sortedKeys(obj) {
			if key := refusedKey(obj[k], t.Elem(), path+k+"."); key != "" {
				return key
			}
		}
	}
	return ""
}

func sortedKeys(obj map[string]any) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
