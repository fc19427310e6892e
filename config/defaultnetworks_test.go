package config_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/config"
)

func TestDefaultNetworks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		err      string // a fragment naming the key; "" = valid
		// for maps a namespace to the default networks its pods get.
		for_ map[string][]config.DefaultNetwork
	}{
		{name: "absent: none", in: "", for_: map[string][]config.DefaultNetwork{"team": nil}},
		{name: "confDir networks and a NAD", in: "defaultNetworks: [side, kube-system/sidecar]\nkubernetes: {}\n",
			for_: map[string][]config.DefaultNetwork{"team": {{Name: "side"}, {Namespace: "kube-system", Name: "sidecar"}}}},
		{name: "an excluded namespace gets none", in: "defaultNetworks: [side]\ndefaultNetworksExclude: [kube-system]\n",
			for_: map[string][]config.DefaultNetwork{"team": {{Name: "side"}}, "kube-system": nil}},
		{name: "beside networks", in: "networks: [a, b]\ndefaultNetworks: [side]\n",
			for_: map[string][]config.DefaultNetwork{"team": {{Name: "side"}}}},
		{name: "a NAD needs Kubernetes mode", in: "defaultNetworks: [kube-system/sidecar]\n",
			err: "defaultNetworks[0]: \"kube-system/sidecar\" names a NetworkAttachmentDefinition, which needs Kubernetes mode"},
		{name: "a NAD in a tenant's namespace is refused", in: "defaultNetworks: [team-a/lan]\nkubernetes: {}\n",
			err: `defaultNetworks[0]: "team-a/lan" names a NetworkAttachmentDefinition in namespace "team-a", which kubernetes.adminNamespaces does not list (["kube-system"])`},
		{name: "a NAD in a listed admin namespace", in: "defaultNetworks: [net-admins/lan]\nkubernetes: {adminNamespaces: [net-admins]}\n",
			for_: map[string][]config.DefaultNetwork{"team": {{Namespace: "net-admins", Name: "lan"}}}},
		{name: "listing admin namespaces replaces kube-system", in: "defaultNetworks: [kube-system/x]\nkubernetes: {adminNamespaces: [net-admins]}\n",
			err: `namespace "kube-system", which kubernetes.adminNamespaces does not list (["net-admins"])`},
		{name: "no admin namespace: no default NAD", in: "defaultNetworks: [kube-system/x]\nkubernetes: {adminNamespaces: []}\n",
			err: `which kubernetes.adminNamespaces does not list ([])`},
		{name: "no admin namespace: confDir networks still", in: "defaultNetworks: [side]\nkubernetes: {adminNamespaces: []}\n",
			for_: map[string][]config.DefaultNetwork{"team": {{Name: "side"}}}},
		{name: "a bad admin namespace", in: "kubernetes: {adminNamespaces: [ok, Not_OK]}\n", err: `kubernetes.adminNamespaces[1]: "Not_OK" is not a Kubernetes namespace name`},
		{name: "an admin namespace twice", in: "kubernetes: {adminNamespaces: [a, a]}\n", err: `kubernetes.adminNamespaces[1]: "a" listed twice`},
		{name: "a bad CNI name", in: "defaultNetworks: [ok, -bad]\n", err: `defaultNetworks[1]: "-bad" is not a valid CNI network name`},
		{name: "a bad namespace", in: "defaultNetworks: [Kube_System/x]\nkubernetes: {}\n", err: `defaultNetworks[0]: "Kube_System/x": "Kube_System" is not a Kubernetes namespace name`},
		{name: "a bad NAD name", in: "defaultNetworks: [ns/Bad_Name]\nkubernetes: {}\n", err: `defaultNetworks[0]: "ns/Bad_Name": "Bad_Name" is not a Kubernetes object name`},
		{name: "a name twice", in: "defaultNetworks: [side, side]\n", err: `defaultNetworks[1]: network "side" listed twice`},
		{name: "also in networks", in: "networks: [side]\ndefaultNetworks: [side]\n", err: `defaultNetworks[0]: network "side" is also in networks`},
		{name: "the limit counts them", in: "limits: {maxNetworksPerPod: 2}\ndefaultNetworks: [a, b]\n",
			err: "defaultNetworks: 2 networks and at least 1 more per pod (networks) exceed limits.maxNetworksPerPod (2)"},
		{name: "the limit counts networks beside them", in: "limits: {maxNetworksPerPod: 3}\nnetworks: [x, y]\ndefaultNetworks: [a, b]\n",
			err: "2 networks and at least 2 more per pod"},
		{name: "room for one more", in: "limits: {maxNetworksPerPod: 3}\ndefaultNetworks: [a, b]\n",
			for_: map[string][]config.DefaultNetwork{"team": {{Name: "a"}, {Name: "b"}}}},
		{name: "a bad excluded namespace", in: "defaultNetworksExclude: [Kube_System]\n", err: `defaultNetworksExclude[0]: "Kube_System"`},
		{name: "a misspelt key", in: "defaultNetwork: [a]\n", err: `unknown key "defaultNetwork"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, config.ErrInvalid) {
					t.Fatalf("Parse(%q) = %v, want an error containing %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			for ns, want := range tc.for_ {
				if got := cfg.DefaultNetworksFor(ns); !reflect.DeepEqual(got, want) {
					t.Errorf("DefaultNetworksFor(%q) = %v, want %v", ns, got, want)
				}
			}
		})
	}
}

func TestParseDefaultNetwork(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"side": "side", "kube-system/sidecar": "kube-system/sidecar", "ns/a.b": "ns/a.b"} {
		d, err := config.ParseDefaultNetwork(in)
		if err != nil || d.String() != want || d.NAD() != strings.Contains(in, "/") {
			t.Errorf("ParseDefaultNetwork(%q) = %+v, %v", in, d, err)
		}
	}
	for _, in := range []string{"", "/x", "ns/", "a/b/c", "ns/x y"} {
		if _, err := config.ParseDefaultNetwork(in); err == nil {
			t.Errorf("ParseDefaultNetwork(%q): no error", in)
		}
	}
}
