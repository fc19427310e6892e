package main

import (
	"encoding/json"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
)

func TestAllChanged(t *testing.T) {
	before := map[string]string{"a": "d1", "b": "d1"}
	for _, tc := range []struct {
		name string
		now  map[string]string
		want bool
	}{
		{"none read yet", map[string]string{}, false},
		{"one left", map[string]string{"a": "d2"}, false},
		{"one unchanged", map[string]string{"a": "d2", "b": "d1"}, false},
		{"one table gone", map[string]string{"a": "d2", "b": ""}, false},
		{"all changed", map[string]string{"a": "d2", "b": "d3"}, true},
		{"extra sandboxes ignored", map[string]string{"a": "d2", "b": "d2", "c": "d1"}, true},
	} {
		if got := allChanged(before, tc.now); got != tc.want {
			t.Errorf("%s: allChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNetStatusIsANodeNetworkEntry(t *testing.T) {
	var got []struct {
		Name string   `json:"name"`
		IPs  []string `json:"ips"`
	}
	if err := json.Unmarshal([]byte(netStatus("benchmnp", "10.201.0.1")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "benchmnp" || len(got[0].IPs) != 1 || got[0].IPs[0] != "10.201.0.1" {
		t.Errorf("netStatus: %+v", got)
	}
}

func TestBenchPolicyNamesTheNetworkAndDiffers(t *testing.T) {
	a := benchPolicy("ns", "p-1", "benchmnp", map[string]string{"app": "server"}, 1)
	b := benchPolicy("ns", "p-2", "benchmnp", map[string]string{"app": "server"}, 2)
	if a.Annotations[netpol.PolicyForAnnotation] != "benchmnp" {
		t.Errorf("policy-for %q", a.Annotations[netpol.PolicyForAnnotation])
	}
	if len(a.Spec.Ingress) != 1 || len(a.Spec.Egress) != 1 || len(a.Spec.PolicyTypes) != 2 {
		t.Errorf("want one ingress and one egress rule, both types: %+v", a.Spec)
	}
	if a.Spec.Ingress[0].Ports[0].Port.IntVal == b.Spec.Ingress[0].Ports[0].Port.IntVal ||
		a.Spec.Ingress[0].From[1].IPBlock.CIDR == b.Spec.Ingress[0].From[1].IPBlock.CIDR {
		t.Error("two policies alike")
	}
}

func TestCPUSeconds(t *testing.T) {
	if got := cpuSeconds(1, 500000, 2, 250000); got != 3.75 {
		t.Errorf("cpuSeconds = %v, want 3.75", got)
	}
}
