package config

import (
	"reflect"
	"strings"
	"testing"
)

// The shipped nri.conf documents the defaults: it must parse and equal them.
func TestShippedNRIConfIsTheDefaults(t *testing.T) {
	got, err := Load("../nri.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	if got.Networks == nil {
		got.Networks = want.Networks
	}
	if len(got.Networks) != 0 {
		t.Errorf("networks = %v, want empty", got.Networks)
	}
	got.Networks = want.Networks
	if len(got.DefaultNetworks)+len(got.DefaultNetworksExclude) != 0 {
		t.Errorf("defaultNetworks = %v, defaultNetworksExclude = %v, want none", got.DefaultNetworks, got.DefaultNetworksExclude)
	}
	got.DefaultNetworks, got.DefaultNetworksExclude = want.DefaultNetworks, want.DefaultNetworksExclude
	if len(got.Namespaces.Include)+len(got.Namespaces.Exclude) != 0 {
		t.Errorf("namespaces = %+v, want no filter", got.Namespaces)
	}
	got.Namespaces = want.Namespaces
	if len(got.PodCNIArgs) != 0 {
		t.Errorf("podCNIArgs = %v, want none", got.PodCNIArgs)
	}
	got.PodCNIArgs = want.PodCNIArgs
	if !reflect.DeepEqual(got, want) {
		t.Errorf("nri.conf = %+v\nwant defaults %+v", got, want)
	}
}

func TestNewKeysAreValidated(t *testing.T) {
	for in, key := range map[string]string{
		"failurePolicy: sometimes":             "failurePolicy",
		"syncAttach: maybe":                    "syncAttach",
		"hook: {podNameAnnotations: ['']}":     "hook.podNameAnnotations[0]",
		"hook: {podUIDAnnotations: [a b]}":     "hook.podUIDAnnotations[0]",
		"namespaces: {exclude: [Kube_System]}": "namespaces.exclude[0]",
		"podSelection: 1":                      "podSelection",
	} {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", in, err, key)
		}
	}
}
