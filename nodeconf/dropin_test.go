package nodeconf

import (
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
)

// TestJudgeDropIn: what node-setup wrote (this release's or another's, its
// marker matching) may be replaced; a file edited after it, or written by
// someone else, may not.
func TestJudgeDropIn(t *testing.T) {
	want := node.ContainerdDropIn()
	older := MarkDropIn([]byte("[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n"))
	edited := strings.Replace(string(MarkDropIn(want)), "enable = true", "enable = false", 1)
	tests := []struct {
		name      string
		installed []byte
		status    DropInStatus
	}{
		{"this release's, as node-setup writes it", MarkDropIn(want), DropInCurrent},
		{"deploy/node's file copied by hand", want, DropInCurrent},
		{"an older release's, untouched", older, DropInOurs},
		{"edited after node-setup wrote it", []byte(edited), DropInEdited},
		{"a line added after the marker", append(MarkDropIn(want), "# mine\n"...), DropInEdited},
		{"someone else's file", []byte("[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n"), DropInEdited},
		{"empty", nil, DropInEdited},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.status, JudgeDropIn(tc.installed, want))
		})
	}
	var doc map[string]any
	require.NoError(t, toml.Unmarshal(MarkDropIn(want), &doc), "the marker is a TOML comment")
}
