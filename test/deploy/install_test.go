package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

// makeCmd runs make in the repo with deploy.mk's targets: through the main
// Makefile when it includes deploy.mk, else with both files.
func makeCmd(t *testing.T, args ...string) string {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make not installed")
	}
	root := RepoRoot()
	main, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	base := []string{"--no-print-directory", "-C", root}
	if !strings.Contains(string(main), "deploy.mk") {
		base = append(base, "-f", "Makefile", "-f", "deploy.mk")
	}
	cmd := exec.Command(mk, append(base, args...)...)
	cmd.Env = append(os.Environ(), "MAKEFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

func assertFile(t *testing.T, path string, mode os.FileMode, sameAs string) {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, mode, st.Mode().Perm(), path)
	if sameAs != "" {
		want, err := os.ReadFile(sameAs)
		require.NoError(t, err)
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.True(t, string(want) == string(got), "%s has the content of %s", path, sameAs)
	}
}

func TestMakeInstallUninstallPrelaunched(t *testing.T) {
	d := t.TempDir()
	bin := filepath.Join(d, "build", "nri-cni")
	vars := []string{"DESTDIR=" + d, "BIN=" + bin}
	out := makeCmd(t, append([]string{"install"}, vars...)...)
	plugin := filepath.Join(d, "opt/nri/plugins/10-nri-cni")
	conf := filepath.Join(d, "etc/nri/conf.d/10-nri-cni.conf")
	assertFile(t, plugin, 0o755, bin)
	assertFile(t, conf, 0o644, filepath.Join(RepoRoot(), "nri.conf"))
	assertFile(t, filepath.Join(d, "etc/nri-cni/net.d"), 0o755, "")
	assert.Contains(t, out, "restart containerd")

	// A second install keeps the admin's config.
	require.NoError(t, os.WriteFile(conf, []byte("logLevel: debug\n"), 0o644))
	out = makeCmd(t, append([]string{"install"}, vars...)...)
	got, err := os.ReadFile(conf)
	require.NoError(t, err)
	assert.Equal(t, "logLevel: debug\n", string(got), "existing config kept")
	assert.Contains(t, out, "kept existing")

	require.NoError(t, os.MkdirAll(filepath.Join(d, "var/lib/nri-cni"), 0o700))
	out = makeCmd(t, append([]string{"uninstall"}, vars...)...)
	assert.NoFileExists(t, plugin)
	assert.NoFileExists(t, conf)
	assert.DirExists(t, filepath.Join(d, "var/lib/nri-cni"), "state is left alone")
	assert.Contains(t, out, "note:")
	makeCmd(t, append([]string{"uninstall"}, vars...)...) // idempotent
}

func TestMakeInstallUninstallHook(t *testing.T) {
	d := t.TempDir()
	bin := filepath.Join(d, "build", "nri-cni")
	vars := []string{"DESTDIR=" + d, "BIN=" + bin}
	out := makeCmd(t, append([]string{"install-hook"}, vars...)...)
	hookBin := filepath.Join(d, "usr/local/bin/nri-cni")
	conf := filepath.Join(d, "etc/nri-cni/nri.conf")
	hookJSON := filepath.Join(d, "usr/share/containers/oci/hooks.d/nri-cni.json")
	assertFile(t, hookBin, 0o755, bin)
	assertFile(t, conf, 0o644, filepath.Join(RepoRoot(), "nri.conf"))
	assertFile(t, hookJSON, 0o644, filepath.Join(RepoRoot(), "hooks.d/nri-cni.json"))
	// nri.conf's confDir, created empty, and what to put there: the hook
	// runs for every container from now on.
	assertFile(t, filepath.Join(d, "etc/nri-cni/net.d"), 0o755, "")
	assert.Contains(t, out, "/etc/nri-cni/net.d is empty: put the CNI network configs")

	require.NoError(t, os.WriteFile(conf, []byte("# mine\n"), 0o644))
	makeCmd(t, append([]string{"install-hook"}, vars...)...)
	got, err := os.ReadFile(conf)
	require.NoError(t, err)
	assert.Equal(t, "# mine\n", string(got), "existing config kept")

	out = makeCmd(t, append([]string{"uninstall-hook"}, vars...)...)
	assert.NoFileExists(t, hookBin)
	assert.NoFileExists(t, hookJSON)
	assert.FileExists(t, conf, "config is left alone")
	assert.DirExists(t, filepath.Join(d, "etc/nri-cni/net.d"), "networks are left alone")
	assert.Contains(t, out, "note:")
}

// TestMakeInstallHookAnnotation: HOOK_MATCH=annotation installs the entry
// that hooks only containers annotated nri-cni.io/networks, under the same
// name, and a new nri.conf with podSelection on (the annotation's value
// names the networks); an admin's config is kept; a net.d with a config
// gets no note.
func TestMakeInstallHookAnnotation(t *testing.T) {
	d := t.TempDir()
	vars := []string{"DESTDIR=" + d, "BIN=" + filepath.Join(d, "build", "nri-cni"), "HOOK_MATCH=annotation"}
	makeCmd(t, append([]string{"install-hook"}, vars...)...)
	assertFile(t, filepath.Join(d, "usr/share/containers/oci/hooks.d/nri-cni.json"), 0o644,
		filepath.Join(RepoRoot(), "hooks.d/nri-cni-annotated.json"))
	conf := filepath.Join(d, "etc/nri-cni/nri.conf")
	assertFile(t, conf, 0o644, "")
	got, err := os.ReadFile(conf)
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join(RepoRoot(), "nri.conf"))
	require.NoError(t, err)
	assert.Contains(t, string(want), "\npodSelection: false\n")
	assert.Equal(t, strings.Replace(string(want), "\npodSelection: false\n", "\npodSelection: true\n", 1), string(got))

	require.NoError(t, os.WriteFile(filepath.Join(d, "etc/nri-cni/net.d/10-a.conflist"), []byte("{}"), 0o644))
	out := makeCmd(t, append([]string{"install-hook"}, vars...)...)
	assert.Contains(t, out, "kept existing")
	assert.NotContains(t, out, "is empty")

	mk, err := exec.LookPath("make")
	require.NoError(t, err)
	bad := exec.Command(mk, "--no-print-directory", "-C", RepoRoot(), "install-hook", "DESTDIR="+d, "HOOK_MATCH=sometimes")
	bad.Env = append(os.Environ(), "MAKEFLAGS=")
	msg, err := bad.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(msg), "HOOK_MATCH=sometimes: want always or annotation")
}

func TestMakeImageAndHelp(t *testing.T) {
	out := makeCmd(t, "-n", "image")
	assert.Contains(t, out, "go run ./test/tools/image")
	assert.Contains(t, out, "-out "+build.DefaultOut)
	assert.Contains(t, out, "-tag "+build.DefaultTag)
	assert.Contains(t, out, "-version ")

	help := makeCmd(t, "help")
	for _, target := range []string{"image", "install", "uninstall", "install-hook", "uninstall-hook"} {
		assert.Regexp(t, `(?m)^\s+`+target+`\s+\S`, help, "make help lists %s", target)
	}
}
