package config_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/config"
)

func TestPodCapabilities(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     []string
		wantErr  []string // substrings of the error; empty = valid
	}{
		{"default", "", []string{"bandwidth"}, nil},
		{"all", "podCapabilities: [bandwidth, mac, ips, portMappings]\n", []string{"bandwidth", "mac", "ips", "portMappings"}, nil},
		{"none", "podCapabilities: []\n", []string{}, nil},
		{"json", `{"podCapabilities": ["portMappings"]}`, []string{"portMappings"}, nil},
		{"unknown", "podCapabilities: [bandwidth, hostPort]\n", nil,
			[]string{`podCapabilities[1]: "hostPort" is not a capability`, "bandwidth, mac, ips, portMappings"}},
		{"wrong case", "podCapabilities: [MAC]\n", nil, []string{`podCapabilities[0]: "MAC"`}},
		{"duplicate", "podCapabilities: [mac, ips, mac]\n", nil, []string{`podCapabilities[2]: "mac" listed twice`}},
		{"not a list", "podCapabilities: mac\n", nil, []string{"podCapabilities"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := config.Parse([]byte(tt.in))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Parse(%q): %v", tt.in, err)
				}
				if !reflect.DeepEqual(got.PodCapabilities, tt.want) {
					t.Errorf("PodCapabilities = %#v, want %#v", got.PodCapabilities, tt.want)
				}
				return
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Parse(%q) = %v, want ErrInvalid", tt.in, err)
			}
			for _, sub := range tt.wantErr {
				if !strings.Contains(err.Error(), sub) {
					t.Errorf("Parse(%q) = %q, want it to contain %q", tt.in, err, sub)
				}
			}
		})
	}
}
