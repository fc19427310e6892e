package nodeconf

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
)

func TestCheckVersion(t *testing.T) {
	tests := []struct {
		runtime, version string
		problem          string // "" = no finding
	}{
		{"containerd", "v2.4.2", ""},
		{"containerd", "2.4.2+unknown", ""},
		{"containerd", "v2.2.0", ""},
		{"containerd", "2.2.0-rc.1", ""},
		{"containerd", "2.1.0", "containerd 2.1.0 has no NRI default validator (2.2 or later)"},
		{"containerd", "v1.7.30", "containerd v1.7.30 has no NRI default validator"},
		{"containerd", "v3.0", ""},
		{"cri-o", "1.36.3", ""},
		{"crio", "1.34.0", ""},
		{"CRI-O", "1.33.13", "cri-o 1.33.13 has no NRI default validator (1.34 or later)"},
		{"containerd", "devel", `containerd reports version "devel": nri-cni cannot tell`},
		{"containerd", "", ""},
		{"podman", "5.0.0", ""}, // Check reports the runtime itself
	}
	for _, tc := range tests {
		t.Run(tc.runtime+" "+tc.version, func(t *testing.T) {
			f := CheckVersion(tc.runtime, tc.version)
			if tc.problem == "" {
				assert.Empty(t, f)
				return
			}
			require.Len(t, f, 1)
			assert.Contains(t, f[0].Problem, tc.problem)
			assert.NotEmpty(t, f[0].Fix)
		})
	}
}

func TestCheckRuntimeAndReport(t *testing.T) {
	setUp := fstest.MapFS{
		"etc/containerd/config.toml":            {Data: MinimalContainerdConfig()},
		"etc/containerd/conf.d/10-nri-cni.toml": {Data: node.ContainerdDropIn()},
	}
	tests := []struct {
		name     string
		o        Options
		ok       bool
		contains []string
	}{
		{"set up", Options{Runtime: "containerd", RuntimeVersion: "v2.4.2", FS: setUp}, true,
			[]string{"containerd v2.4.2: NRI on, default validator on",
				"read: /etc/containerd/config.toml, /etc/containerd/conf.d/10-nri-cni.toml"}},
		{"set up, but too old", Options{Runtime: "containerd", RuntimeVersion: "2.1.0", FS: setUp}, false,
			[]string{"containerd 2.1.0: not set up", "has no NRI default validator", "fix: upgrade containerd to 2.2 or later"}},
		{"not set up, root named in the fix", Options{Runtime: "containerd", FS: fstest.MapFS{}, Root: "/host"}, false,
			[]string{"/etc/containerd/config.toml is absent", "checked: /etc/containerd/config.toml",
				"fix: run `nri-cni node-setup --runtime containerd --root /host`, then restart containerd (systemctl restart containerd)"}},
		{"unknown runtime", Options{Runtime: "podman", FS: fstest.MapFS{}}, false,
			[]string{`runtime "podman": nri-cni cannot tell`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.o)
			assert.Equal(t, tc.ok, r.OK(), "%v", r.Findings)
			for _, c := range tc.contains {
				assert.Contains(t, r.String(), c)
			}
		})
	}
}

// TestCheckReadsUnderRoot: Options.Root is the host's / (a directory here).
func TestCheckReadsUnderRoot(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "etc/crio/crio.conf.d", node.CRIODropInName)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, node.CRIODropIn(), 0o644))
	r := Check(Options{Runtime: "cri-o", RuntimeVersion: "1.36.3", Root: root})
	assert.True(t, r.OK(), "%v", r.Findings)
	assert.Equal(t, []string{CRIODropIn}, r.Files, "host paths, without the root")
}
