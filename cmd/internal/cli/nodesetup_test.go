package cli

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
				"etc/containerd/conf.d/10-nri-cni.toml": string(nodeconf.MarkDropIn(node.ContainerdDropIn()))},
			out: []string{"/etc/containerd/conf.d/10-nri-cni.toml: written", "/etc/containerd/config.toml: written: there was none",
				"restart containerd (systemctl restart containerd) to apply", "NRI on, default validator on"}},
		{name: "containerd, kind's v2 config", args: []string{"--runtime", "containerd"}, files: map[string]string{ctdMain: kindMain},
			code: 0, again: true,
			want: map[string]string{ctdMain: "# explicitly use v2 config format\nversion = 2\n" +
				`imports = ["/etc/containerd/conf.d/10-nri-cni.toml"] # added by nri-cni node-setup` + "\n" +
				"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n"},
			out: []string{`/etc/containerd/config.toml: added imports = ["/etc/containerd/conf.d/10-nri-cni.toml"] as a top-level key`}},
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
			want: map[string]string{"etc/crio/crio.conf.d/10-nri-cni.conf": string(nodeconf.MarkDropIn(node.CRIODropIn()))},
			out:  []string{"restart CRI-O (systemctl restart crio) to apply", "cri-o: NRI on, default validator on"}},
		{name: "crio, a later drop-in turns it off", args: []string{"--runtime", "cri-o"},
			files: map[string]string{crioOff: "[crio.nri.default_validator]\nnri_enable_default_validator = false\n"}, code: 1,
			out: []string{"/etc/crio/crio.conf.d/99-off.conf sets nri_enable_default_validator = false"}},
		{name: "unknown runtime", args: []string{"--runtime", "podman"}, code: 2, err: `--runtime containerd or --runtime crio (got "podman")`},
		{name: "relative --config", args: []string{"--runtime", "containerd", "--config", "config.toml"}, code: 1,
			err: `--config "config.toml": give the absolute path on the host`},
		{name: "crio, custom config and drop-in dir", args: []string{"--runtime", "crio", "--config", "/srv/crio.conf", "--config-dir", "/srv/crio.d"},
			files: map[string]string{"srv/crio.conf": "[crio.nri]\nenable_nri = true\n"}, code: 0, again: true,
			want: map[string]string{"srv/crio.d/10-nri-cni.conf": string(nodeconf.MarkDropIn(node.CRIODropIn())),
				"etc/crio/crio.conf.d/10-nri-cni.conf": ""},
			out: []string{"read: /srv/crio.conf, /srv/crio.d/10-nri-cni.conf"}},
		{name: "--config-dir is CRI-O's", args: []string{"--runtime", "containerd", "--config-dir", "/srv/d"}, code: 1,
			err: "--config-dir is CRI-O's"},
		{name: "deploy/node's drop-in copied by hand: kept", args: []string{"--runtime", "crio"},
			files: map[string]string{"etc/crio/crio.conf.d/10-nri-cni.conf": string(node.CRIODropIn())}, code: 0,
			want: map[string]string{"etc/crio/crio.conf.d/10-nri-cni.conf": string(node.CRIODropIn())}, out: []string{"nothing changed"}},
		{name: "an absolute symlink under the root resolves inside it", args: []string{"--runtime", "containerd"},
			files: map[string]string{"srv/containerd/config.toml": kindMain}, link: [2]string{"etc/containerd", "/srv/containerd"}, code: 0,
			want: map[string]string{"srv/containerd/conf.d/10-nri-cni.toml": string(nodeconf.MarkDropIn(node.ContainerdDropIn()))},
			out:  []string{"/etc/containerd/config.toml: added imports"}},
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

// TestNodeSetupKeepsBackups: every file node-setup changes is kept first,
// outside the drop-in dirs (which the runtime reads as config), and the
// output says where.
func TestNodeSetupKeepsBackups(t *testing.T) {
	const kindMain = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n"
	older := string(nodeconf.MarkDropIn([]byte("[crio.nri]\nenable_nri = true\n")))
	tests := []struct {
		name, runtime, file, before, backupDir, dropInDir string
	}{
		{"containerd's main config", "containerd", "etc/containerd/config.toml", kindMain, "etc/containerd", "etc/containerd/conf.d"},
		{"an older node-setup's CRI-O drop-in", "crio", "etc/crio/crio.conf.d/10-nri-cni.conf", older, "etc/crio", "etc/crio/crio.conf.d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, tc.file)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, tc.file), []byte(tc.before), 0o640))
			code, stdout, stderr := runApp(t, nil, "node-setup", "--root", root, "--runtime", tc.runtime)
			require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
			backups, err := filepath.Glob(filepath.Join(root, tc.backupDir, filepath.Base(tc.file)+".nri-cni-backup-*"))
			require.NoError(t, err)
			require.Len(t, backups, 1, stdout)
			data, err := os.ReadFile(backups[0])
			require.NoError(t, err)
			assert.Equal(t, tc.before, string(data))
			st, err := os.Stat(backups[0])
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o640), st.Mode().Perm(), "the backup keeps the file's mode")
			assert.Contains(t, stdout, "/"+tc.file+": ")
			assert.Contains(t, stdout, "the previous file is kept as /"+strings.TrimPrefix(backups[0], root+"/"))
			entries, err := os.ReadDir(filepath.Join(root, tc.dropInDir))
			require.NoError(t, err)
			for _, e := range entries {
				assert.NotContains(t, e.Name(), "nri-cni-backup", "nothing of node-setup's besides its drop-in in the runtime's drop-in dir")
				assert.False(t, strings.HasPrefix(e.Name(), "."), "no temporary file left: %s", e.Name())
			}
		})
	}
}

// TestNodeSetupRefusesAnEditedDropIn: a drop-in edited since node-setup
// wrote it is left alone, with the file named and the way on; --force
// replaces it and keeps the edited one as a backup.
func TestNodeSetupRefusesAnEditedDropIn(t *testing.T) {
	for _, rt := range []struct{ runtime, file string }{
		{"containerd", "etc/containerd/conf.d/10-nri-cni.toml"},
		{"crio", "etc/crio/crio.conf.d/10-nri-cni.conf"},
	} {
		t.Run(rt.runtime, func(t *testing.T) {
			root := t.TempDir()
			code, stdout, stderr := runApp(t, nil, "node-setup", "--root", root, "--runtime", rt.runtime)
			require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
			p := filepath.Join(root, rt.file)
			written, err := os.ReadFile(p)
			require.NoError(t, err)
			edited := strings.Replace(string(written), "= true", "= true # mine", 1)
			require.NoError(t, os.WriteFile(p, []byte(edited), 0o644))

			code, stdout, stderr = runApp(t, nil, "node-setup", "--root", root, "--runtime", rt.runtime)
			assert.Equal(t, 1, code, stdout)
			assert.Contains(t, stderr, "/"+rt.file+" differs from what node-setup wrote")
			assert.Contains(t, stderr, "--force")
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			assert.Equal(t, edited, string(data), "left as it is")

			code, stdout, stderr = runApp(t, nil, "node-setup", "--root", root, "--runtime", rt.runtime, "--force")
			require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
			data, err = os.ReadFile(p)
			require.NoError(t, err)
			assert.Equal(t, string(written), string(data), "replaced")
			backups, err := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(p)), filepath.Base(p)+".nri-cni-backup-*"))
			require.NoError(t, err)
			require.Len(t, backups, 1)
			data, err = os.ReadFile(backups[0])
			require.NoError(t, err)
			assert.Equal(t, edited, string(data), "the edited file is kept")
		})
	}
}

// TestNodeWriterSyncsDirectories: after a rename (and a backup), the
// directories whose entries changed are synced, so the change survives a
// power loss.
func TestNodeWriterSyncsDirectories(t *testing.T) {
	root := t.TempDir()
	var synced []string
	w := &nodeWriter{root: root, now: time.Now().UTC(), syncDir: func(dir string) error {
		synced = append(synced, strings.TrimPrefix(dir, root))
		return syncDir(dir)
	}}
	require.NoError(t, w.write("/etc/crio/crio.conf.d/a.conf", []byte("a\n"), "/etc/crio/crio.conf.d", "written"))
	assert.Equal(t, []string{"/etc/crio/crio.conf.d", "/etc/crio"}, synced, "the file's dir; the temporary file's")
	synced = nil
	require.NoError(t, w.write("/etc/crio/crio.conf.d/a.conf", []byte("b\n"), "/etc/crio/crio.conf.d", "written"))
	assert.Equal(t, []string{"/etc/crio", "/etc/crio/crio.conf.d", "/etc/crio"}, synced, "the backup's dir first")
}

// TestNodeSetupCheckJudgesTheRunningRuntime: with a runtime serving the
// socket its config names (here this test, which started before the files
// were written), --check says restart pending (exit 3) and node-setup
// says so too (exit 0: the files are set up); files older than the
// runtime's start are fail-closed.
func TestNodeSetupCheckJudgesTheRunningRuntime(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "run/containerd"), 0o755))
	l, err := net.Listen("unix", filepath.Join(root, "run/containerd/containerd.sock"))
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	code, stdout, _ := runApp(t, nil, "node-setup", "--root", root, "--runtime", "containerd")
	require.Equal(t, 0, code, stdout)
	assert.Contains(t, stdout, fmt.Sprintf("state: restart-pending: changed after the running containerd (pid %d)", os.Getpid()))
	code, stdout, _ = runApp(t, nil, "node-setup", "--root", root, "--runtime", "containerd", "--check")
	assert.Equal(t, 3, code, stdout)
	assert.Contains(t, stdout, "fix: restart containerd (systemctl restart containerd)")

	old := time.Now().Add(-24 * time.Hour)
	for _, p := range []string{"etc/containerd/config.toml", "etc/containerd/conf.d/10-nri-cni.toml"} {
		require.NoError(t, os.Chtimes(filepath.Join(root, p), old, old))
	}
	code, stdout, _ = runApp(t, nil, "node-setup", "--root", root, "--runtime", "containerd", "--check")
	assert.Equal(t, 0, code, stdout)
	assert.Contains(t, stdout, fmt.Sprintf("state: fail-closed: the running containerd (pid %d", os.Getpid()))
}
