package cni_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/cni"
)

func goodIdentity() cni.PodIdentity {
	return cni.PodIdentity{
		Namespace: "kube-system",
		Name:      "coredns-5d78c9869d-abcde",
		InfraID:   strings.Repeat("ab", 32),
		UID:       "3f0b7c1e-2d4a-4b8e-9c6f-1a2b3c4d5e6f",
	}
}

func TestArgsOrderAndContent(t *testing.T) {
	t.Parallel()
	p := goodIdentity()
	got, err := p.Args()
	if err != nil {
		t.Fatalf("Args: %v", err)
	}
	want := [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", p.Namespace},
		{"K8S_POD_NAME", p.Name},
		{"K8S_POD_INFRA_CONTAINER_ID", p.InfraID},
		{"K8S_POD_UID", p.UID},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Args() = %q\nwant     %q", got, want)
	}
}

func TestArgsAcceptsEdgeValues(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]cni.PodIdentity{
		"empty":           {},
		"253 characters":  {Name: strings.Repeat("n", 253)},
		"dots and dashes": {Namespace: "a.b-c_d", Name: "x:y/z", UID: "u"},
		"non-ASCII":       {Name: "pöd"},
	} {
		if _, err := p.Args(); err != nil {
			t.Errorf("%s: Args() = %v, want nil", name, err)
		}
	}
}

func TestArgsRejectsBadValues(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"semicolon":   "a;K8S_POD_NAME=evil",
		"equals":      "a=b",
		"newline":     "a\nb",
		"nul":         "a\x00b",
		"tab":         "a\tb",
		"DEL":         "a\x7fb",
		"254 chars":   strings.Repeat("x", 254),
		"only ';'":    ";",
		"trailing cr": "abc\r",
	}
	fields := []struct {
		key string
		set func(*cni.PodIdentity, string)
	}{
		{"K8S_POD_NAMESPACE", func(p *cni.PodIdentity, v string) { p.Namespace = v }},
		{"K8S_POD_NAME", func(p *cni.PodIdentity, v string) { p.Name = v }},
		{"K8S_POD_INFRA_CONTAINER_ID", func(p *cni.PodIdentity, v string) { p.InfraID = v }},
		{"K8S_POD_UID", func(p *cni.PodIdentity, v string) { p.UID = v }},
	}
	for _, f := range fields {
		for name, v := range bad {
			t.Run(f.key+"/"+name, func(t *testing.T) {
				t.Parallel()
				p := goodIdentity()
				f.set(&p, v)
				pairs, err := p.Args()
				if !errors.Is(err, cni.ErrBadArg) {
					t.Fatalf("Args() = %q, %v; want ErrBadArg", pairs, err)
				}
				if pairs != nil {
					t.Errorf("Args() returned pairs %q with an error", pairs)
				}
				if !strings.Contains(err.Error(), f.key) {
					t.Errorf("Args() error %q does not name %s", err, f.key)
				}
			})
		}
	}
}
