package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unitFile is a systemd unit as section -> key -> values (in order).
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "%s: %q is not key=value", path, line)
			require.NotEmpty(t, section, "%s: %q outside a section", path, line)
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	require.NoError(t, sc.Err())
	return u
}

func (u unitFile) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	require.Len(t, v, 1, "[%s] %s", section, key)
	return v[0]
}

func TestSystemdUnitShape(t *testing.T) {
	u := parseUnit(t, filepath.Join(RepoRoot(), "deploy/systemd/nri-cni.service"))
	exec := strings.Fields(u.one(t, "Service", "ExecStart"))
	assert.Equal(t, []string{"/usr/local/bin/nri-cni", "run", "--config", "/etc/nri-cni/nri.conf"}, exec,
		"the binary make install-service installs, with the README's config path")
	_, err := runFlags(exec[2:])
	require.NoError(t, err, "ExecStart uses only flags of nri-cni run")

	after := strings.Fields(strings.Join(u["Unit"]["After"], " "))
	assert.Contains(t, after, "containerd.service")
	assert.Contains(t, after, "crio.service")
	assert.Empty(t, u["Unit"]["Wants"], "no Wants=: it would start a runtime the admin left disabled")
	assert.Empty(t, u["Unit"]["Requires"])
	assert.True(t, strings.HasPrefix(u.one(t, "Unit", "Documentation"), "https://"))
	assert.Equal(t, "on-failure", u.one(t, "Service", "Restart"))
	assert.NotEmpty(t, u.one(t, "Service", "RestartSec"))
	assert.Equal(t, "multi-user.target", u.one(t, "Install", "WantedBy"))
	assert.Equal(t, "yes", u.one(t, "Service", "NoNewPrivileges"))
	// What would break the netns and CNI work: dropped capabilities, no
	// setns, a private mount namespace that hides later netns pins.
	for _, key := range []string{"User", "DynamicUser", "CapabilityBoundingSet", "AmbientCapabilities", "RestrictNamespaces",
		"PrivateNetwork", "PrivateTmp", "PrivateMounts", "PrivateDevices", "ProtectSystem", "ProtectProc", "ProcSubset",
		"ReadOnlyPaths", "InaccessiblePaths", "ProtectKernelModules", "ProtectControlGroups", "SystemCallFilter"} {
		assert.Empty(t, u["Service"][key], "%s would get in the way of netns/CNI work", key)
	}
}

func TestMakeInstallUninstallService(t *testing.T) {
	d := t.TempDir()
	bin := filepath.Join(d, "build", "nri-cni")
	vars := []string{"DESTDIR=" + d, "BIN=" + bin}
	out := makeCmd(t, append([]string{"install-service"}, vars...)...)
	svcBin := filepath.Join(d, "usr/local/bin/nri-cni")
	conf := filepath.Join(d, "etc/nri-cni/nri.conf")
	unit := filepath.Join(d, "etc/systemd/system/nri-cni.service")
	assertFile(t, svcBin, 0o755, bin)
	assertFile(t, conf, 0o644, filepath.Join(RepoRoot(), "nri.conf"))
	assertFile(t, unit, 0o644, filepath.Join(RepoRoot(), "deploy/systemd/nri-cni.service"))
	assert.Contains(t, out, "staged "+unit)
	assert.NotContains(t, out, "systemctl", "nothing to enable in a staging dir")

	t.Run("systemd-analyze verify", func(t *testing.T) {
		sa, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Skip("systemd-analyze not installed: the unit is checked by TestSystemdUnitShape only")
		}
		// verify wants ExecStart's binary to exist: point it at the staged one.
		data, err := os.ReadFile(unit)
		require.NoError(t, err)
		staged := filepath.Join(t.TempDir(), "nri-cni.service")
		require.NoError(t, os.WriteFile(staged, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/nri-cni", svcBin)), 0o644))
		out, err := exec.Command(sa, "verify", staged).CombinedOutput()
		require.NoError(t, err, "systemd-analyze verify:\n%s", out)
		assert.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify warns (it exits 0 on ignored lines)")
	})

	// A second install keeps the admin's config.
	require.NoError(t, os.WriteFile(conf, []byte("logLevel: debug\n"), 0o644))
	out = makeCmd(t, append([]string{"install-service"}, vars...)...)
	got, err := os.ReadFile(conf)
	require.NoError(t, err)
	assert.Equal(t, "logLevel: debug\n", string(got), "existing config kept")
	assert.Contains(t, out, "kept existing")

	// The OCI hook shares the binary: uninstalling the service keeps it then.
	makeCmd(t, append([]string{"install-hook"}, vars...)...)
	out = makeCmd(t, append([]string{"uninstall-service"}, vars...)...)
	assert.NoFileExists(t, unit)
	assert.FileExists(t, svcBin, "kept for the OCI hook")
	assert.Contains(t, out, "OCI hook")
	makeCmd(t, append([]string{"uninstall-hook"}, vars...)...)

	makeCmd(t, append([]string{"install-service"}, vars...)...)
	out = makeCmd(t, append([]string{"uninstall-service"}, vars...)...)
	assert.NoFileExists(t, unit)
	assert.NoFileExists(t, svcBin)
	assert.FileExists(t, conf, "config is left alone")
	assert.Contains(t, out, "note:")
	makeCmd(t, append([]string{"uninstall-service"}, vars...)...) // idempotent
}

func TestMakeInstallServiceFollowsPaths(t *testing.T) {
	d := t.TempDir()
	makeCmd(t, "install-service", "DESTDIR="+d, "BIN="+filepath.Join(d, "build", "nri-cni"),
		"BINDIR=/opt/nri-cni/bin", "CONF_DIR=/etc/nri-cni-alt")
	u := parseUnit(t, filepath.Join(d, "etc/systemd/system/nri-cni.service"))
	assert.Equal(t, "/opt/nri-cni/bin/nri-cni run --config /etc/nri-cni-alt/nri.conf", u.one(t, "Service", "ExecStart"))
	assert.FileExists(t, filepath.Join(d, "opt/nri-cni/bin/nri-cni"))
	assert.FileExists(t, filepath.Join(d, "etc/nri-cni-alt/nri.conf"))
}

func TestMakeHelpListsServiceTargets(t *testing.T) {
	help := makeCmd(t, "help")
	for _, target := range []string{"install-service", "uninstall-service"} {
		assert.Regexp(t, `(?m)^\s+`+target+`\s+\S`, help, "make help lists %s", target)
	}
}
