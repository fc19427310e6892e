package plan

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/config"
)

// The parser, the NetworkConfig, the capabilities and the docs follow
// npwgKeys: a key added, renamed or made a capability in one place and not
// the others fails here.
func TestNPWGKeyTable(t *testing.T) {
	var names []string
	for _, k := range npwgKeys {
		names = append(names, k.name)
	}
	t.Run("the parser's fields are the table's keys", func(t *testing.T) {
		var tags []string
		st := reflect.TypeOf(selectionElement{})
		for i := range st.NumField() {
			tags = append(tags, strings.Split(st.Field(i).Tag.Get("json"), ",")[0])
		}
		assert.ElementsMatch(t, names, tags)
	})
	t.Run("capabilities are podCapabilities'", func(t *testing.T) {
		for _, k := range npwgKeys {
			if k.capability != "" {
				assert.Contains(t, config.KnownCapabilities(), k.capability, k.name)
				assert.Equal(t, k.name, npwgKeyOf(k.capability))
			}
		}
	})
	t.Run("a selection's capabilities are the table's", func(t *testing.T) {
		sel := NetworkSelection{IPs: []string{"10.0.0.5/24"}, MAC: "02:00:00:00:00:01", PortMappings: []portMapping{{}},
			Bandwidth: map[string]any{"ingressRate": 1}}
		var want []string
		for _, k := range npwgKeys {
			if k.capability != "" {
				want = append(want, k.capability)
			}
		}
		got := slices.Sorted(func(yield func(string) bool) {
			for c := range sel.caps() {
				if !yield(c) {
					return
				}
			}
		})
		assert.ElementsMatch(t, want, got)
	})
	t.Run("a NetworkConfig takes or refuses each key", func(t *testing.T) {
		for _, k := range npwgKeys {
			_, refused := refusedKeys[k.name]
			assert.True(t, k.networkConfig != refused, "%s: taken by a NetworkConfig (%t) xor refused with a reason (%t)", k.name, k.networkConfig, refused)
		}
	})
	t.Run("docs/kubernetes.md names every key", func(t *testing.T) {
		data, err := os.ReadFile("../docs/kubernetes.md")
		require.NoError(t, err)
		for _, n := range names {
			assert.Contains(t, string(data), "`"+n+"`", "the NPWG keys table of docs/kubernetes.md")
		}
	})
}
