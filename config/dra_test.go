package config

import (
	"strings"
	"testing"
)

// kubernetes.dra.maxDevicesPerNamespace: a safe default (a quarter of the
// default budget), never more than maxDevices, validated like maxDevices.
func TestDRADevicesPerNamespace(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *DRAConfig
		want int
	}{
		{"no dra section", nil, DefaultDRAMaxDevicesPerNamespace},
		{"default", &DRAConfig{}, 128},
		{"set", &DRAConfig{MaxDevicesPerNamespace: 32}, 32},
		{"at most maxDevices", &DRAConfig{MaxDevices: 64}, 64},
		{"larger than maxDevices", &DRAConfig{MaxDevices: 100, MaxDevicesPerNamespace: 400}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.DevicesPerNamespace(); got != tc.want {
				t.Errorf("DevicesPerNamespace() = %d, want %d", got, tc.want)
			}
		})
	}
	if DefaultDRAMaxDevicesPerNamespace*4 != DefaultDRAMaxDevices {
		t.Errorf("the default share is a quarter of the default budget")
	}
	for in, ok := range map[string]bool{
		"kubernetes: {dra: {enabled: true, maxDevicesPerNamespace: 16}}":   true,
		"kubernetes: {dra: {enabled: true, maxDevicesPerNamespace: -1}}":   false,
		"kubernetes: {dra: {enabled: true, maxDevicesPerNamespace: 5000}}": false,
	} {
		_, err := Parse([]byte(in))
		if ok && err != nil {
			t.Errorf("Parse(%q): %v", in, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "kubernetes.dra.maxDevicesPerNamespace")) {
			t.Errorf("Parse(%q) = %v, want an error naming kubernetes.dra.maxDevicesPerNamespace", in, err)
		}
	}
}
