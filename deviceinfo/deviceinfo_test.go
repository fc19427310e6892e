package deviceinfo

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The spec's examples (section 4.3 and 6.1.2, with its typographic quotes
// and missing commas repaired) and what the reference writers produce.
var specExamples = map[string]string{
	"pci":                 `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2","pf-pci-address":"0000:01:02.0"}}`,
	"vdpa":                `{"type":"vdpa","version":"1.1.0","vdpa":{"parent-device":"vdpa3","driver":"vhost","path":"/dev/vdpa-vhost0"}}`,
	"vhost-user":          `{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"server","path":"/var/run/vhost.sock"}}`,
	"pci vhost-net":       `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:18:0a.2","vhost-net":"/dev/vhost-net","pf-pci-address":"0000:18:00.1"}}`,
	"vdpa full":           `{"type":"vdpa","version":"1.1.0","vdpa":{"parent-device":"vdpa2","driver":"vhost","path":"/dev/vhost-vdpa0","pci-address":"0000:02:01.6","pf-pci-address":"0000:02:01.0"}}`,
	"memif":               `{"type":"memif","version":"1.1.0","memif":{"role":"master","path":"/run/memif/net1.sock","mode":"ethernet"}}`,
	"pci rdma (sriov dp)": `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.2","rdma-device":"mlx5_4,mlx5_5"}}`,
	"virtio vdpa no path": `{"type":"vdpa","version":"1.1.0","vdpa":{"parent-device":"vdpa:0000:65:00.3","driver":"virtio","pci-address":"0000:65:00.3"}}`,
	"pci representor":     `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.2","representor-device":"eth3"}}`,
}

func TestParseValid(t *testing.T) {
	for name, doc := range specExamples {
		t.Run(name, func(t *testing.T) {
			d, err := Parse([]byte(doc))
			require.NoError(t, err)
			out, err := d.Marshal()
			require.NoError(t, err)
			again, err := Parse(out)
			require.NoError(t, err)
			assert.Equal(t, d, again, "round trip")
		})
	}
	for _, tc := range []struct {
		name string
		doc  string
		want *DeviceInfo
	}{
		{"version 1.0.0", `{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:00:1f.7"}}`,
			&DeviceInfo{Type: TypePCI, Version: "1.0.0", PCI: &PCI{PCIAddress: "0000:00:1f.7"}}},
		{"a later minor version, unknown keys ignored", `{"type":"pci","version":"1.7.0","pci":{"pci-address":"0000:00:01.0","numa":1},"x":{"y":[1]}}`,
			&DeviceInfo{Type: TypePCI, Version: "1.7.0", PCI: &PCI{PCIAddress: "0000:00:01.0"}}},
		{"VMD domain", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"10000:01:00.0"}}`,
			&DeviceInfo{Type: TypePCI, Version: "1.1.0", PCI: &PCI{PCIAddress: "10000:01:00.0"}}},
		{"upper-case hex", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:AF:1F.7"}}`,
			&DeviceInfo{Type: TypePCI, Version: "1.1.0", PCI: &PCI{PCIAddress: "0000:AF:1F.7"}}},
		{"memif punt (NAD client spelling)", `{"type":"memif","version":"1.1.0","memif":{"role":"slave","path":"/a","mode":"punt"}}`,
			&DeviceInfo{Type: TypeMemif, Version: "1.1.0", Memif: &Memif{Role: "slave", Path: "/a", Mode: "punt"}}},
		{"another section beside the type's", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:01.0"},"vhost-user":{"mode":"client","path":"/s"}}`,
			&DeviceInfo{Type: TypePCI, Version: "1.1.0", PCI: &PCI{PCIAddress: "0000:00:01.0"}, VhostUser: &VhostUser{Mode: "client", Path: "/s"}}},
		{"whitespace around", " \n{\"type\":\"pci\",\"version\":\"1.1.0\",\"pci\":{\"pci-address\":\"0000:00:01.0\"}}\n\n",
			&DeviceInfo{Type: TypePCI, Version: "1.1.0", PCI: &PCI{PCIAddress: "0000:00:01.0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse([]byte(tc.doc))
			require.NoError(t, err)
			assert.Equal(t, tc.want, d)
		})
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
		is              error
	}{
		{"empty", ``, "empty or truncated", nil},
		{"null", `null`, `no "version"`, nil},
		{"array", `[]`, "not a JSON object", nil},
		{"string", `"pci"`, "not a JSON object", nil},
		{"garbage", `{"type":`, "empty or truncated", nil},
		{"syntax", `{"type" "pci"}`, "not JSON (offset", nil},
		{"two objects", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:01.0"}}{}`, "data after the JSON object", nil},
		{"no type", `{"version":"1.1.0","pci":{"pci-address":"0000:00:01.0"}}`, `no "type"`, nil},
		{"no version", `{"type":"pci","pci":{"pci-address":"0000:00:01.0"}}`, `no "version"`, nil},
		{"version 2", `{"type":"pci","version":"2.0.0","pci":{"pci-address":"0000:00:01.0"}}`, "this reads 1.x.y", ErrVersion},
		{"version not semver", `{"type":"pci","version":"1.1","pci":{"pci-address":"0000:00:01.0"}}`, "not MAJOR.MINOR.PATCH", nil},
		{"version leading zero", `{"type":"pci","version":"01.1.0","pci":{"pci-address":"0000:00:01.0"}}`, "not MAJOR.MINOR.PATCH", nil},
		{"version as number", `{"type":"pci","version":1.1,"pci":{"pci-address":"0000:00:01.0"}}`, `"version" is not a string`, nil},
		{"unknown type", `{"type":"auxiliary","version":"1.1.0","auxiliary":{"name":"mlx5_core.sf.4"}}`, `unknown device-info type "auxiliary"`, ErrUnknownType},
		{"type without its section", `{"type":"vdpa","version":"1.1.0","pci":{"pci-address":"0000:00:01.0"}}`, `without its "vdpa" section`, nil},
		{"pci without address", `{"type":"pci","version":"1.1.0","pci":{}}`, `no "pci.pci-address"`, nil},
		{"pci short BDF", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"01:02.2"}}`, "not a PCI address", nil},
		{"pci bad function", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.8"}}`, "not a PCI address", nil},
		{"pci bad device", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:20.0"}}`, "not a PCI address", nil},
		{"pci path as address", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"../../etc/passwd"}}`, "not a PCI address", nil},
		{"bad pf address", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2","pf-pci-address":"eth0"}}`, "pf-pci-address", nil},
		{"relative vhost-net", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2","vhost-net":"dev/vhost-net"}}`, "not an absolute path", nil},
		{"rdma device with slash", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2","rdma-device":"../mlx5_0"}}`, "not a device name", nil},
		{"vdpa bad driver", `{"type":"vdpa","version":"1.1.0","vdpa":{"parent-device":"vdpa0","driver":"vfio","path":"/dev/x"}}`, `"vdpa.driver" is "vfio"`, nil},
		{"vdpa no parent", `{"type":"vdpa","version":"1.1.0","vdpa":{"driver":"vhost","path":"/dev/x"}}`, `no "vdpa.parent-device"`, nil},
		{"vhost-user bad mode", `{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"both","path":"/s"}}`, `"vhost-user.mode"`, nil},
		{"vhost-user no path", `{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"client"}}`, `no "vhost-user.path"`, nil},
		{"memif bad role and mode", `{"type":"memif","version":"1.1.0","memif":{"role":"leader","path":"/s","mode":"raw"}}`, `"memif.mode"`, nil},
		{"control character", `{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"client","path":"/s\nx"}}`, "control character", nil},
		{"invalid UTF-8", "{\"type\":\"vhost-user\",\"version\":\"1.1.0\",\"vhost-user\":{\"mode\":\"client\",\"path\":\"/s\xff\"}}", "invalid UTF-8", nil},
		{"path too long", `{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"client","path":"/` + strings.Repeat("a", 4096) + `"}}`, "longer than 4096", nil},
		{"section not an object", `{"type":"pci","version":"1.1.0","pci":"0000:01:02.2"}`, `"pci" is not a`, nil},
		{"too large", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2"},"pad":"` + strings.Repeat(" ", MaxSize) + `"}`, "larger than", ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
		})
	}
}

// A decoding error never quotes the input (a file may hold anything).
func TestParseErrorsDoNotQuoteTheInput(t *testing.T) {
	_, err := Parse([]byte(`{"type": secret-token-123}`))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "secret-token-123")
}

func TestNewPCIAndMarshal(t *testing.T) {
	out, err := NewPCI("0000:3b:02.2").Marshal()
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.2"}}`, string(out))
	_, err = NewPCI("eth0").Marshal()
	assert.ErrorIs(t, err, ErrInvalid, "Marshal validates")

	// The JSON keys are the spec's.
	var m map[string]any
	out, err = (&DeviceInfo{Type: TypeVDPA, Version: Version, VDPA: &VDPA{ParentDevice: "vdpa0", Driver: "vhost", Path: "/dev/vhost-vdpa-0",
		PCIAddress: "0000:01:00.2", PFPCIAddress: "0000:01:00.0", RepresentorDevice: "eth5"}}).Marshal()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &m))
	assert.Equal(t, map[string]any{"parent-device": "vdpa0", "driver": "vhost", "path": "/dev/vhost-vdpa-0", "pci-address": "0000:01:00.2",
		"pf-pci-address": "0000:01:00.0", "representor-device": "eth5"}, m["vdpa"])
}

func TestIsPCIAddress(t *testing.T) {
	for s, want := range map[string]bool{"0000:00:00.0": true, "ffff:ff:1f.7": true, "10000:00:02.0": true,
		"0000:00:00.8": false, "0000:00:20.0": false, "00:00.0": false, "0000:00:00": false, "": false, "0000:00:00.0 ": false,
		"pci0000:00": false, "mlx5_core.sf.4": false} {
		assert.Equal(t, want, IsPCIAddress(s), s)
	}
}

func TestValidateNil(t *testing.T) {
	var d *DeviceInfo
	assert.True(t, errors.Is(d.Validate(), ErrInvalid))
}
