package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/nodeconf"
)

func TestNodeSetup(t *testing.T) {
	const kindMain = "# explicitly use v2 config format\nversion = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n"
	const ctdMain, crioOff = "etc/containerd/config.toml", "etc/crio/crio.conf.d/99-off.conf"
	tests := []struct {
		name  string
		args  []string          // after --root ROOT
		files map[string]string // under the root, before
		code  int
		want  map[string]string // under the root, after ("" = absent)
		out   []string          // in stdout
		err   string            // in stderr
		// again: a second run changes nothing.
		again bool
		link  [2]string // a symlink under the root to make: path, target
	}{
		{name: "containerd, no main config", args: []string{"--runtime", "containerd"}, code: 0, again: true,
			want: map[string]string{ctdMain: string(nodeconf.MinimalContainerdConfig()),
				"etc/containerd/conf.d/10-nri-cni.toml": string(node.ContainerdDropIn())},
			out: []string{"/etc/containerd/conf.d/10-nri-cni.toml: written", "/etc/containerd/config.toml: written: there was none",
				"restart containerd (systemctl restart containerd) to apply", "NRI on, default validator on"}},
		{name: "containerd, kind's v2 config", args: []string{"--runtime", "containerd"}, files: map[string]string{ctdMain: kindMain},
			code: 0, again: true,
			want: map[string]string{ctdMain: "# explicitly use v2 config format\nversion = 2\n" +
				`imports = ["/etc/containerd/conf.d/*.toml"] # added by nri-cni node-setup` + "\n" +
				"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n"},
			out: []string{`/etc/containerd/config.toml: added imports = ["/etc/containerd/conf.d/*.toml"] as a top-level key`}},
		{name: "containerd, imports elsewhere", args: []string{"--runtime", "containerd"},
			files: map[string]string{ctdMain: "version = 3\nimports = [\"/etc/other/*.toml\"]\n"}, code: 0, again: true,
			want: map[string]string{ctdMain: "version = 3\nimports = [\"/etc/other/*.toml\", \"/etc/containerd/conf.d/10-nri-cni.toml\"]\n"}},
		{name: "containerd, imports already cover it", args: []string{"--runtime", "containerd"},
			files: map[string]string{ctdMain: "version = 3\nimports = [\"conf.d/*.toml\"]\n"}, code: 0,
			want: map[string]string{ctdMain: "version = 3\nimports = [\"conf.d/*.toml\"]\n"},
			out:  []string{"/etc/containerd/conf.d/10-nri-cni.toml: written", "restart containerd"}},
		{name: "containerd, custom main config", args: []string{"--runtime", "containerd", "--config", "/srv/ctd.toml"}, code: 0,
			want: map[string]string{"srv/ctd.toml": string(nodeconf.MinimalContainerdConfig()), ctdMain: ""}},
		{name: "containerd, main config not TOML", args: []string{"--runtime", "containerd"}, files: map[string]string{ctdMain: "[x\n"},
			code: 1, err: "/etc/containerd/config.toml: not valid TOML"},
		{name: "check only, nothing set up", args: []string{"--runtime", "containerd", "--check"}, code: 1,
			want: map[string]string{ctdMain: "", "etc/containerd/conf.d/10-nri-cni.toml": ""},
			out:  []string{"/etc/containerd/config.toml is absent", "fix: run `nri-cni node-setup --runtime containerd --root "}},
		{name: "crio", args: []string{"--runtime", "crio"}, code: 0, again: true,
			want: map[string]string{"etc/crio/crio.conf.d/10-nri-cni.conf": string(node.CRIODropIn())},
			out:  []string{"restart CRI-O (systemctl restart crio) to apply", "cri-o: NRI on, default validator on"}},
		{name: "crio, a later drop-in turns it off", args: []string{"--runtime", "cri-o"},
			files: map[string]string{crioOff: "[crio.nri.default_validator]\nnri_enable_default_validator = false\n"}, code: 1,
			out: []string{"/etc/crio/crio.conf.d/99-off.conf sets nri_enable_default_validator = false"}},
		{name: "unknown runtime", args: []string{"--runtime", "podman"}, code: 2, err: `--runtime containerd or --runtime crio (got "podman")`},
		{name: "relative --config", args: []string{"--runtime", "containerd", "--config", "config.toml"}, code: 1,
			err: `--config "config.toml": give the main config's absolute path`},
		{name: "stray arguments", args: []string{"--runtime", "crio", "now"}, code: 1, err: "unexpected arguments"},
		{name: "a symlinked main config is not replaced", args: []string{"--runtime", "containerd"},
			files: map[string]string{"usr/share/containerd.toml": kindMain}, link: [2]string{ctdMain, "../../usr/share/containerd.toml"},
			code: 1, err: "/etc/containerd/config.toml is a symlink", want: map[string]string{"usr/share/containerd.toml": kindMain}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, data := range tc.files {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(data), 0o600))
			}
			if tc.link[0] != "" {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, tc.link[0])), 0o755))
				require.NoError(t, os.Symlink(tc.link[1], filepath.Join(root, tc.link[0])))
			}
			args := append([]string{"node-setup", "--root", root}, tc.args...)
			code, stdout, stderr := runApp(t, nil, args...)
			assert.Equal(t, tc.code, code, "stdout: %s\nstderr: %s", stdout, stderr)
			for _, o := range tc.out {
				assert.Contains(t, stdout, o)
			}
			if tc.err != "" {
				assert.Contains(t, stderr, tc.err)
			}
			for p, want := range tc.want {
				data, err := os.ReadFile(filepath.Join(root, p))
				if want == "" {
					assert.ErrorIs(t, err, os.ErrNotExist, p)
					continue
				}
				require.NoError(t, err, p)
				assert.Equal(t, want, string(data), p)
			}
			if p := filepath.Join(root, ctdMain); tc.files[ctdMain] != "" && tc.code == 0 {
				st, err := os.Stat(p)
				require.NoError(t, err)
				assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the main config keeps its mode")
			}
			if !tc.again {
				return
			}
			before := snapshot(t, root)
			code, stdout, _ = runApp(t, nil, args...)
			assert.Equal(t, 0, code)
			assert.Contains(t, stdout, "nothing changed")
			assert.NotContains(t, stdout, "restart")
			assert.Equal(t, before, snapshot(t, root), "a second run writes nothing")
		})
	}
}

// snapshot is every file under root with its content and modification time.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	require.NoError(t, filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		m[p] = string(data) + "@" + info.ModTime().String()
		return err
	}))
	return m
}
