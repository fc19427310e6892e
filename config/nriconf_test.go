package config

import (
	"reflect"
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
	if !reflect.DeepEqual(got, want) {
		t.Errorf("nri.conf = %+v\nwant defaults %+v", got, want)
	}
}
