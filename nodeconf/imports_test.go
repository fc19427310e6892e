package nodeconf

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pelletier/go-toml/v2"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
)

func TestEnsureImport(t *testing.T) {
	// The drop-in itself, not a glob of its directory (which would activate
	// every stray file there).
	const added = `imports = ["/etc/containerd/conf.d/10-nri-cni.toml"] # added by nri-cni node-setup` + "\n"
	tests := []struct {
		name   string
		in     string
		out    string // "" = unchanged
		change string
		err    string
	}{
		{name: "kind's v2 config: after its last top-level key",
			in:     kindMain,
			out:    "# explicitly use v2 config format\nversion = 2\n" + added + "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n",
			change: `added imports = ["/etc/containerd/conf.d/10-nri-cni.toml"] as a top-level key`},
		{name: "tables only: first in the file",
			in:  "# header\n[plugins.\"io.containerd.nri.v1.nri\"]\n  socket_path = \"/x\"\n",
			out: added + "# header\n[plugins.\"io.containerd.nri.v1.nri\"]\n  socket_path = \"/x\"\n"},
		{name: "after a multi-line value and its comment, not inside them",
			in: "version = 3\ndisabled_plugins = [\n  \"a\",\n  # [not a table]\n] # trailing\n" +
				"x = \"\"\"\n# not a comment\n[not a table]\"\"\"\n\n# about the table\n[debug]\n  level = \"info\"\n",
			out: "version = 3\ndisabled_plugins = [\n  \"a\",\n  # [not a table]\n] # trailing\n" +
				"x = \"\"\"\n# not a comment\n[not a table]\"\"\"\n" + added + "\n# about the table\n[debug]\n  level = \"info\"\n"},
		{name: "no trailing newline", in: "version = 3", out: "version = 3\n" + added},
		{name: "empty file", in: "", out: added},
		{name: "CRLF kept", in: "version = 2\r\n[debug]\r\n",
			out: "version = 2\r\n" + strings.TrimSuffix(added, "\n") + "\r\n[debug]\r\n"},
		{name: "empty imports: the path goes in",
			in:     "version = 3\nimports = []\n[debug]\n",
			out:    "version = 3\nimports = [\"/etc/containerd/conf.d/10-nri-cni.toml\"]\n[debug]\n",
			change: `appended "/etc/containerd/conf.d/10-nri-cni.toml" to imports`},
		{name: "imports elsewhere: appended",
			in:  "imports = [\"/etc/other/*.toml\"] # ours\nversion = 3\n",
			out: "imports = [\"/etc/other/*.toml\", \"/etc/containerd/conf.d/10-nri-cni.toml\"] # ours\nversion = 3\n"},
		{name: "multi-line imports with a trailing comma and comments",
			in:  "imports = [\n  '/etc/a.toml', # a\n  # b\n]\n",
			out: "imports = [\n  '/etc/a.toml', \"/etc/containerd/conf.d/10-nri-cni.toml\", # a\n  # b\n]\n"},
		{name: "covered by a relative glob (an older node-setup's): kept", in: "imports = [\"conf.d/*.toml\"]\n"},
		{name: "covered by an exact path", in: "imports = [\"/etc/containerd/conf.d/10-nri-cni.toml\"]\n"},
		{name: "covered by an unclean path", in: "imports = [\"/etc/containerd/../containerd/conf.d//*.toml\"]\n"},
		{name: "imports not a list", in: "imports = \"conf.d\"\n", err: `/etc/containerd/config.toml: imports = "conf.d" is not a list of paths`},
		{name: "imports in a table is not containerd's", in: "[x]\nimports = []\n", out: added + "[x]\nimports = []\n"},
		{name: "not TOML", in: "version = \n", err: "/etc/containerd/config.toml: not valid TOML"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, change, err := EnsureImport([]byte(tc.in), ContainerdConfig, ContainerdDropIn)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			if tc.out == "" {
				assert.Equal(t, tc.in, string(out), "unchanged")
				assert.Empty(t, change)
				return
			}
			assert.Equal(t, tc.out, string(out))
			if tc.change != "" {
				assert.Equal(t, tc.change, change)
			}
			again, change2, err := EnsureImport(out, ContainerdConfig, ContainerdDropIn)
			require.NoError(t, err)
			assert.Equal(t, string(out), string(again), "a second run changes nothing")
			assert.Empty(t, change2)
		})
	}
}

// TestMinimalContainerdConfigImportsTheDropInOnly: the main config
// node-setup writes where there is none imports nri-cni's drop-in and no
// other file of conf.d.
func TestMinimalContainerdConfigImportsTheDropInOnly(t *testing.T) {
	var doc map[string]any
	require.NoError(t, toml.Unmarshal(MinimalContainerdConfig(), &doc))
	assert.Equal(t, []any{ContainerdDropIn}, doc["imports"])
	r := Check(Options{Runtime: "containerd", FS: fstest.MapFS{
		mainPath:                              {Data: MinimalContainerdConfig()},
		dropInPath:                            {Data: node.ContainerdDropIn()},
		"etc/containerd/conf.d/99-stray.toml": file("[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = false\n"),
	}})
	assert.True(t, r.OK(), r.String())
	assert.Equal(t, []string{ContainerdConfig, ContainerdDropIn}, r.Files, "the stray file is not read")
}
