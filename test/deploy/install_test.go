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
	makeCmd(t, append([]string{"install-hook"}, vars...)...)
	hookBin := filepath.Join(d, "usr/local/bin/nri-cni")
	conf := filepath.Join(d, "etc/nri-cni/nri.conf")
	hookJSON := filepath.Join(d, "usr/share/containers/oci/hooks.d/nri-cni.json")
	assertFile(t, hookBin, 0o755, bin)
	assertFile(t, conf, 0o644, filepath.Join(RepoRoot(), "nri.conf"))
	assertFile(t, hookJSON, 0o644, filepath.Join(RepoRoot(), "hooks.d/nri-cni.json"))

	require.NoError(t, os.WriteFile(conf, []byte("# mine\n"), 0o644))
	makeCmd(t, append([]string{"install-hook"}, vars...)...)
	got, err := os.ReadFile(conf)
	require.NoError(t, err)
	assert.Equal(t, "# mine\n", string(got), "existing config kept")

	out := makeCmd(t, append([]string{"uninstall-hook"}, vars...)...)
	assert.NoFileExists(t, hookBin)
	assert.NoFileExists(t, hookJSON)
	assert.FileExists(t, conf, "config is left alone")
	assert.Contains(t, out, "note:")
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
