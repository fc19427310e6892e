package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeviceClasses(t *testing.T) {
	const head = "kubernetes:\n  dra:\n    enabled: true\n    deviceClasses:\n"
	cfg, err := Parse([]byte(head + "      default: [team-net]\n      namespaces:\n        net-admins: [nri-cni.io, team-net]\n        locked: []\n"))
	require.NoError(t, err)
	d := cfg.Kubernetes.DRA
	for _, tc := range []struct{ ns, class, msg string }{
		{"team-a", "team-net", ""},
		{"team-a", "nri-cni.io", `DeviceClass "nri-cni.io" is not one namespace team-a may use (kubernetes.dra.deviceClasses.default: team-net)`},
		{"net-admins", "nri-cni.io", ""},
		{"locked", "team-net", "(kubernetes.dra.deviceClasses.namespaces.locked: none)"},
		{"team-a", "", "no DeviceClass found for the request"},
	} {
		err := d.ClassAllowed(tc.ns, tc.class)
		if tc.msg == "" {
			assert.NoError(t, err, "%s %s", tc.ns, tc.class)
			continue
		}
		assert.ErrorContains(t, err, tc.msg)
	}
	var none *DRAConfig
	assert.NoError(t, none.ClassAllowed("team-a", "anything"), "no DRA config: any class")
	assert.NoError(t, (&DRAConfig{}).ClassAllowed("team-a", ""), "no rule: any class")

	for in, msg := range map[string]string{
		"      namespaces: {a: [x]}\n":                         "kubernetes.dra.deviceClasses.default: required",
		"      default: [Team-Net]\n":                          "kubernetes.dra.deviceClasses.default[0]: \"Team-Net\" is not a DeviceClass name",
		"      default: [a, a]\n":                              "kubernetes.dra.deviceClasses.default[1]: \"a\" listed twice",
		"      default: []\n      namespaces: {Bad_NS: [a]}\n": "kubernetes.dra.deviceClasses.namespaces: \"Bad_NS\" is not a namespace name",
		"      default: []\n      namespaces: {ns: [x..y]}\n":  "kubernetes.dra.deviceClasses.namespaces.ns[0]",
		"      default: []\n      namespaces: {ns: null}\n":    "kubernetes.dra.deviceClasses.namespaces.ns: a list of DeviceClasses",
		"      default: []\n      other: 1\n":                  "other",
		"      default: [" + strings.Repeat("a", 254) + "]\n":  "is not a DeviceClass name",
	} {
		_, err := Parse([]byte(head + in))
		require.ErrorIs(t, err, ErrInvalid, in)
		assert.ErrorContains(t, err, msg, in)
	}
}
