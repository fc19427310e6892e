package cni

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithCNIArgsCopiesAndInjects(t *testing.T) {
	for _, tc := range []struct{ name, conf string }{
		{"conflist", `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a","mtu":9000,"args":{"other":{"x":1},"cni":{"admin":"set"}}},{"type":"b","capabilities":{"mac":true}}]}`},
		{"single plugin", `{"cniVersion":"1.0.0","name":"n","type":"a","mtu":9000,"args":{"other":{"x":1},"cni":{"admin":"set"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Parse([]byte(tc.conf))
			require.NoError(t, err)
			orig := string(n.List.Bytes)
			origPlugin := string(n.List.Plugins[0].Bytes)

			// (libcni re-encodes each plugin's config through float64, as for
			// any config: integers beyond 2^53 lose precision there.)
			c, err := n.WithCNIArgs(map[string]any{"vlan": json.Number("4094"), "mode": "x"})
			require.NoError(t, err)
			assert.Equal(t, orig, string(n.List.Bytes), "the original is untouched")
			assert.Equal(t, origPlugin, string(n.List.Plugins[0].Bytes))
			assert.Equal(t, "n", c.Name)
			assert.Len(t, c.List.Plugins, len(n.List.Plugins))
			for _, p := range c.List.Plugins {
				var conf map[string]any
				require.NoError(t, decodeNumbers(p.Bytes, &conf))
				args := conf["args"].(map[string]any)
				cniArgs := args["cni"].(map[string]any)
				assert.Equal(t, json.Number("4094"), cniArgs["vlan"])
				assert.Equal(t, "x", cniArgs["mode"])
			}
			var first map[string]any
			require.NoError(t, decodeNumbers(c.List.Plugins[0].Bytes, &first))
			assert.Equal(t, json.Number("9000"), first["mtu"])
			assert.Equal(t, map[string]any{"x": json.Number("1")}, first["args"].(map[string]any)["other"], "other args kept")
			assert.Equal(t, "set", first["args"].(map[string]any)["cni"].(map[string]any)["admin"], "the config's own args.cni kept")
			assert.Contains(t, string(c.List.Bytes), `"vlan":4094`, "the list bytes (libcni's cache) carry them too")

			_, err = n.WithCNIArgs(map[string]any{"admin": "pod"})
			assert.ErrorIs(t, err, ErrArgsConflict)
			assert.Contains(t, err.Error(), `"admin"`)

			same, err := n.WithCNIArgs(nil)
			require.NoError(t, err)
			assert.Same(t, n, same)
		})
	}
}
