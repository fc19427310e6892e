package plan

import (
	"github.com/nri-cni/nri-cni/apis/v1alpha1"
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
		var taken []string
		for _, k := range npwgKeys {
			if k.networkConfig {
				taken = append(taken, k.name)
				continue
			}
			_, err := v1alpha1.Decode([]byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig","`+k.name+`":null}`), 1024)
			if assert.Error(t, err, k.name) {
				assert.NotContains(t, err.Error(), "is not one of its keys", "%s: refused with a reason", k.name)
			}
		}
		assert.Equal(t, taken, v1alpha1.Keys(), "the table's NetworkConfig keys are the type's, in its order")
	})
	t.Run("docs/kubernetes.md names every key", func(t *testing.T) {
		data, err := os.ReadFile("../docs/kubernetes.md")
		require.NoError(t, err)
		for _, n := range names {
			assert.Contains(t, string(data), "`"+n+"`", "the NPWG keys table of docs/kubernetes.md")
		}
	})
}
