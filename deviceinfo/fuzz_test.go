package deviceinfo

// Fuzz target for Parse: whatever a device plugin, driver or CNI plugin
// wrote, Parse never panics, never accepts more than MaxSize bytes, and
// what it accepts is valid, re-encodes, and parses back to the same value.
// Plain `go test` runs the seeds; `make fuzz` runs the target for a while.

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, s := range specExamples {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		"", "null", "{}", "[]", `"pci"`, "1", "\x00", "\xff\xfe{}",
		`{"type":"pci","version":"1.1.0"}`,
		`{"type":"pci","version":"1.1.0","pci":null}`,
		`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:01.0"}}{}`,
		`{"TYPE":"pci","Version":"1.1.0","PCI":{"PCI-ADDRESS":"0000:00:01.0"}}`,
		`{"type":"pci","type":"vdpa","version":"1.1.0","pci":{"pci-address":"0000:00:01.0"}}`,
		`{"type":"memif","version":"1.1.0","memif":{"role":"master","path":"/x","mode":"punt"}}`,
		`{"type":"vhost-user","version":"1.99999999.0","vhost-user":{"mode":"client","path":"/\u0000"}}`,
		`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:01.0","rdma-device":"\ud800"}}`,
		`{"type":"auxiliary","version":"1.1.0"}`,
		strings.Repeat("[", 10000),
		`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:01.0"},"x":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			if d != nil {
				t.Fatal("an error and a value")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if len(data) > MaxSize {
			t.Fatalf("accepted %d bytes", len(data))
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("accepted an invalid value: %v", err)
		}
		out, err := d.Marshal()
		if err != nil {
			t.Fatalf("cannot re-encode an accepted value: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-encoded value does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(d, again) {
			t.Fatalf("round trip changed the value:\n%+v\n%+v", d, again)
		}
	})
}
