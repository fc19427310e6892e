package nodeconf

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"

	"github.com/nri-cni/nri-cni/deploy/node"
)

// kindMain is shaped like a kind node's config.toml: version 2, CRI tables
// under io.containerd.grpc.v1.cri, no imports.
const kindMain = `# explicitly use v2 config format
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
`

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

const (
	mainPath   = "etc/containerd/config.toml"
	dropInPath = "etc/containerd/conf.d/10-nri-cni.toml"
)

func TestCheckContainerd(t *testing.T) {
	dropIn := &fstest.MapFile{Data: node.ContainerdDropIn()}
	tests := []struct {
		name      string
		files     fstest.MapFS
		config    string // Options.ContainerdConfig
		nri, vali bool
		read      []string
		problems  []string // one substring per finding, in order
		fix       string   // substring of the first finding's fix
	}{
		{name: "no main config: built-in defaults, no drop-ins", files: fstest.MapFS{dropInPath: dropIn},
			nri: true, problems: []string{"/etc/containerd/config.toml is absent"}, fix: "nri-cni node-setup --runtime containerd"},
		{name: "kind's v2 config without imports", files: fstest.MapFS{mainPath: file(kindMain), dropInPath: dropIn},
			nri: true, read: []string{"/etc/containerd/config.toml"},
			problems: []string{"drop-in /etc/containerd/conf.d/10-nri-cni.toml is not read: no `imports` of /etc/containerd/config.toml"}},
		{name: "v2 config without imports, no drop-in", files: fstest.MapFS{mainPath: file(kindMain)},
			nri: true, problems: []string{"10-nri-cni.toml is absent"}, fix: "systemctl restart containerd"},
		{name: "v2 config importing the glob", files: fstest.MapFS{
			mainPath: file("version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n\n" +
				"[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n"),
			dropInPath: dropIn},
			nri: true, vali: true, read: []string{"/etc/containerd/config.toml", "/etc/containerd/conf.d/10-nri-cni.toml"}},
		{name: "minimal main config node-setup writes", files: fstest.MapFS{mainPath: {Data: MinimalContainerdConfig()}, dropInPath: dropIn},
			nri: true, vali: true},
		{name: "v3 config, relative glob", files: fstest.MapFS{
			mainPath: file("version = 3\nimports = [\"conf.d/*.toml\"]\n"), dropInPath: dropIn}, nri: true, vali: true},
		{name: "relative import of a file that imports the drop-in, breadth first", files: fstest.MapFS{
			mainPath:                         file("version = 3\nimports = [\"extra/base.toml\", \"/etc/other/*.toml\"]\n"),
			"etc/containerd/extra/base.toml": file("imports = [\"../conf.d/*.toml\"]\n"),
			"etc/other/a.toml":               file("version = 3\n"),
			dropInPath:                       dropIn},
			nri: true, vali: true, read: []string{"/etc/containerd/config.toml", "/etc/containerd/extra/base.toml",
				"/etc/other/a.toml", "/etc/containerd/conf.d/10-nri-cni.toml"}},
		{name: "custom main config path", config: "/srv/ctd.toml", files: fstest.MapFS{
			"srv/ctd.toml": file("imports = [\"/etc/containerd/conf.d/*.toml\"]\n"), dropInPath: dropIn}, nri: true, vali: true},
		{name: "custom main config path, absent", config: "/srv/ctd.toml", files: fstest.MapFS{},
			nri: true, problems: []string{"/srv/ctd.toml is absent"}, fix: "node-setup --runtime containerd --config /srv/ctd.toml`"},
		{name: "an imported file that is absent stops containerd", files: fstest.MapFS{
			mainPath: file("imports = [\"/etc/containerd/nope.toml\", \"/etc/containerd/conf.d/*.toml\"]\n"), dropInPath: dropIn},
			problems: []string{"/etc/containerd/nope.toml: imported, but absent"}},
		{name: "not TOML", files: fstest.MapFS{mainPath: file("[plugins\n")},
			problems: []string{"/etc/containerd/config.toml: not valid TOML"}, fix: "correct that file"},
		{name: "main disables NRI, the drop-in turns it on again", files: fstest.MapFS{
			mainPath:   file("imports = [\"conf.d/*.toml\"]\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n  socket_path = \"/x\"\n"),
			dropInPath: dropIn}, nri: true, vali: true},
		{name: "a later drop-in turns the validator off", files: fstest.MapFS{
			mainPath: file("imports = [\"conf.d/*.toml\"]\n"), dropInPath: dropIn,
			"etc/containerd/conf.d/20-off.toml": file("[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = false\n")},
			nri: true, problems: []string{"/etc/containerd/conf.d/20-off.toml sets enable = false"}, fix: "remove that key from /etc/containerd/conf.d/20-off.toml"},
		{name: "an earlier drop-in's setting is overridden by ours", files: fstest.MapFS{
			mainPath: file("imports = [\"conf.d/*.toml\"]\n"), dropInPath: dropIn,
			"etc/containerd/conf.d/05-off.toml": file("[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = false\n")},
			nri: true, vali: true},
		{name: "a later drop-in turns NRI off", files: fstest.MapFS{
			mainPath: file("imports = [\"conf.d/*.toml\"]\n"), dropInPath: dropIn,
			"etc/containerd/conf.d/99-nonri.toml": file("[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n")},
			vali: true, problems: []string{"NRI is off: /etc/containerd/conf.d/99-nonri.toml sets disable = true"}},
		{name: "imports elsewhere only", files: fstest.MapFS{
			mainPath: file("imports = [\"/etc/other/*.toml\"]\n"), dropInPath: dropIn},
			nri: true, problems: []string{"is not read"}},
		{name: "the validator enabled in the main config itself", files: fstest.MapFS{
			mainPath: file("[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = true\n")}, nri: true, vali: true},
		{name: "circular imports are read once", files: fstest.MapFS{
			mainPath:   file("imports = [\"conf.d/*.toml\", \"config.toml\"]\n"),
			dropInPath: {Data: append([]byte("imports = [\"/etc/containerd/config.toml\"]\n"), node.ContainerdDropIn()...)}},
			nri: true, vali: true, read: []string{"/etc/containerd/config.toml", "/etc/containerd/conf.d/10-nri-cni.toml"}},
		{name: "a value that is not a boolean", files: fstest.MapFS{
			mainPath: file("[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = \"yes\"\n")},
			problems: []string{`/etc/containerd/config.toml: plugins."io.containerd.nri.v1.nri".default_validator.enable = "yes" is not true or false`}},
		{name: "imports not a list", files: fstest.MapFS{mainPath: file("imports = \"conf.d\"\n")},
			problems: []string{`/etc/containerd/config.toml: imports = "conf.d" is not a list of paths`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(Options{Runtime: "containerd", FS: tc.files, ContainerdConfig: tc.config})
			assert.Equal(t, RuntimeContainerd, r.Runtime)
			assert.Equal(t, tc.nri, r.NRIEnabled, "NRI enabled")
			assert.Equal(t, tc.vali, r.ValidatorEnabled, "validator enabled")
			if tc.read != nil {
				assert.Equal(t, tc.read, r.Files)
			}
			if assert.Len(t, r.Findings, len(tc.problems), "%v", r.Findings) {
				for i, p := range tc.problems {
					assert.Contains(t, r.Findings[i].Problem, p)
				}
			}
			if tc.fix != "" && len(r.Findings) > 0 {
				assert.Contains(t, r.Findings[0].Fix, tc.fix)
			}
			assert.Equal(t, len(tc.problems) == 0, r.OK())
		})
	}
}

func TestCoversAndImports(t *testing.T) {
	entries, err := Imports(map[string]any{"imports": []any{"conf.d/*.toml", "/abs/x.toml", "../up/./y.toml"}}, "/etc/containerd/config.toml")
	assert.NoError(t, err)
	assert.Equal(t, []string{"/etc/containerd/conf.d/*.toml", "/abs/x.toml", "/etc/up/y.toml"}, entries)
	for _, tc := range []struct {
		entry, target string
		want          bool
	}{
		{"/etc/containerd/conf.d/*.toml", ContainerdDropIn, true},
		{ContainerdDropIn, ContainerdDropIn, true},
		{"/etc/containerd/conf.d/*.conf", ContainerdDropIn, false},
		{"/etc/containerd/*.toml", ContainerdDropIn, false}, // '*' stops at '/', as in filepath.Glob
		// containerd globs only entries with '*': '?' is taken literally.
		{"/etc/containerd/conf.d/10-nri-cni.tom?", ContainerdDropIn, false},
	} {
		assert.Equal(t, tc.want, covers(tc.entry, tc.target), "%s vs %s", tc.entry, tc.target)
	}
}

// fstestFS is a tree of one file, the drop-ins of deploy/node beside it.
func fstestFS(p, data string) fstest.MapFS {
	return fstest.MapFS{p: file(data), dropInPath: {Data: node.ContainerdDropIn()},
		"etc/crio/crio.conf.d/" + node.CRIODropInName: {Data: node.CRIODropIn()}}
}
