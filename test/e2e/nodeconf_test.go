package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// `nri-cni node-setup --root TMP` against host-like config trees, read back by
// the real runtimes. The runtimes read TMP as their /etc: the files
// node-setup writes name host paths (/etc/containerd/conf.d/*.toml), so each
// dump runs in a private mount namespace with TMP/etc bind-mounted over /etc
// (nothing of the host's /etc is read or changed).

// kindLikeV2 is shaped like a kind node's config.toml (version 2, CRI tables
// under io.containerd.grpc.v1.cri) with NRI keys of its own that must survive.
const kindLikeV2 = `# explicitly use v2 config format
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
[plugins."io.containerd.grpc.v1.cri".containerd]
  discard_unpacked_layers = true
  snapshotter = "overlayfs"
[plugins."io.containerd.nri.v1.nri"]
  socket_path = "/run/custom/nri.sock"
  plugin_request_timeout = "7s"
`

// TestNodeSetupContainerd: node-setup on (a) no config, (b) a kind-like
// version 2 config, (c) a version 3 config with imports of its own. In each,
// containerd 2.4.2's `config dump` after it differs from the dump before it
// only in the default validator's enable (now true) and the imports list:
// every other setting of the node is kept. A second run changes nothing.
func TestNodeSetupContainerd(t *testing.T) {
	testenv.RequireRoot(t)
	ctd := filepath.Join(world.tools.ContainerdDir, "containerd")
	const nriTable = "plugins.'io.containerd.nri.v1.nri'"
	const validator = nriTable + ".default_validator"
	// containerd's dump lists its default glob first whatever the file
	// says; without a glob in the file it reads no drop-in through it.
	const importsExact = "imports: ['/etc/containerd/conf.d/*.toml'] -> " +
		"['/etc/containerd/conf.d/*.toml', '/etc/containerd/conf.d/10-nri-cni.toml']"
	tests := []struct {
		name  string
		files map[string]string
		// diff is what the dump must change: "table key: before -> after".
		diff []string
		kept []string // lines of the dump after
		// stray: a file that lands in conf.d later (turning the validator
		// off) stays inactive: node-setup imports its drop-in, not a glob.
		stray bool
	}{
		{name: "no config",
			diff: []string{importsExact, validator + " enable: false -> true"}},
		{name: "kind-like version 2", files: map[string]string{"etc/containerd/config.toml": kindLikeV2},
			diff: []string{importsExact, validator + " enable: false -> true"}, stray: true,
			kept: []string{"sandbox = 'registry.k8s.io/pause:3.9'",
				"socket_path = '/run/custom/nri.sock'", "plugin_request_timeout = '7s'"}},
		{name: "version 3 with imports", files: map[string]string{
			"etc/containerd/config.toml": "version = 3\nimports = [\"other.d/*.toml\"]\n\n" +
				"[plugins.\"io.containerd.nri.v1.nri\"]\n  plugin_request_timeout = \"9s\"\n",
			"etc/containerd/other.d/a.toml": "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\n  restrict_oom_score_adj = true\n"},
			diff: []string{
				"imports: ['/etc/containerd/conf.d/*.toml', 'other.d/*.toml'] -> " +
					"['/etc/containerd/conf.d/*.toml', 'other.d/*.toml', '/etc/containerd/conf.d/10-nri-cni.toml']",
				validator + " enable: false -> true"},
			kept: []string{"restrict_oom_score_adj = true", "plugin_request_timeout = '9s'"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := hostTree(t, tc.files)
			dump := func() string {
				return runtimeDump(t, root, ctd, "config", "dump", "--config", "/etc/containerd/config.toml")
			}
			before := dump()

			code, out := nodeSetup(t, root, "--runtime", "containerd", "--check")
			assert.Equal(t, 1, code, "not set up yet:\n%s", out)
			code, out = nodeSetup(t, root, "--runtime", "containerd")
			require.Equal(t, 0, code, out)
			assert.Contains(t, out, "restart containerd (systemctl restart containerd) to apply")
			after := dump()
			code, again := nodeSetup(t, root, "--runtime", "containerd")
			assert.Equal(t, 0, code, again)
			assert.Contains(t, again, "nothing changed")

			assert.Equal(t, tc.diff, dumpDiff(before, after), "what node-setup changed in containerd's view of the node:\n%s", out)
			assert.Contains(t, deploy.TOMLTable(after, nriTable), "disable = false")
			assert.Contains(t, deploy.TOMLTable(after, validator), "required_plugins = []", "per pod only: no node-wide list")
			for _, k := range tc.kept {
				assert.Contains(t, after, k)
			}
			if tc.stray {
				require.NoError(t, os.WriteFile(filepath.Join(root, "etc/containerd/conf.d/99-stray.toml"),
					[]byte("[plugins.\"io.containerd.nri.v1.nri\".default_validator]\n  enable = false\n"), 0o644))
				assert.Contains(t, deploy.TOMLTable(dump(), validator), "enable = true", "the stray file is not read")
				code, out := nodeSetup(t, root, "--runtime", "containerd", "--check")
				assert.Equal(t, 0, code, "node-setup's check agrees:\n%s", out)
			}
		})
	}
}

// TestNodeSetupCRIO: node-setup on no CRI-O config and on a crio.conf that
// turned NRI off with a socket of its own, read back by CRI-O 1.36.3's
// `crio config` (no daemon); and a later drop-in that turns the validator
// off again, which node-setup's check names and crio agrees with.
func TestNodeSetupCRIO(t *testing.T) {
	testenv.RequireRoot(t)
	crio := filepath.Join(world.tools.CRIODir, "crio")
	tests := []struct {
		name  string
		files map[string]string
		code  int
		diff  []string
		out   string
	}{
		{name: "no config", diff: []string{"crio.nri.default_validator nri_enable_default_validator: false -> true"}},
		{name: "crio.conf turned NRI off", files: map[string]string{
			"etc/crio/crio.conf": "[crio.nri]\nenable_nri = false\nnri_listen = \"/run/custom/nri.sock\"\n"},
			diff: []string{"crio.nri enable_nri: false -> true", "crio.nri.default_validator nri_enable_default_validator: false -> true"}},
		{name: "a later drop-in turns the validator off", files: map[string]string{
			"etc/crio/crio.conf.d/99-off.conf": "[crio.nri.default_validator]\nnri_enable_default_validator = false\n"},
			code: 1, out: "/etc/crio/crio.conf.d/99-off.conf sets nri_enable_default_validator = false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := hostTree(t, tc.files)
			dump := func() string { return crioKeys(runtimeDump(t, root, crio, "config")) }
			before := dump()
			code, out := nodeSetup(t, root, "--runtime", "crio")
			require.Equal(t, tc.code, code, out)
			assert.Contains(t, out, tc.out)
			assert.Equal(t, tc.diff, dumpDiff(before, dump()), "what node-setup changed in CRI-O's view of the node:\n%s", out)
			if tc.files["etc/crio/crio.conf"] != "" {
				assert.Contains(t, dump(), `nri_listen = "/run/custom/nri.sock"`, "crio.conf's own NRI keys stay")
			}
		})
	}
}

// TestNodeConfCRIORefusesWithoutNRICNI: a CRI-O 1.36.3 daemon set up as the
// cluster harness sets it up (deploy/node's drop-in in its crio.conf.d, its
// own private NRI socket and dirs) starts, and with nri-cni not connected it
// refuses the container of a pod annotated as deploy/base's policy annotates
// it, and creates that of a pod without the annotation.
func TestNodeConfCRIORefusesWithoutNRICNI(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := crioWithNodeDropIn(ctx, t)
	cleanupPodsAt(t, c.Address)
	cri := dialCRI(ctx, t, c.Address)
	defer cri.Close()

	for _, tc := range []struct {
		name        string
		annotations map[string]string
		err         string
	}{
		{"required", map[string]string{requiredAnnotation + "/pod": `["nri-cni"]`}, `required plugin "nri-cni" not present`},
		{"plain", nil, ""},
	} {
		spec := harness.PodSpec{Name: tc.name, Namespace: "e2e", UID: harness.RandomName("uid-"), Annotations: tc.annotations}
		id, err := cri.RunPod(ctx, spec)
		require.NoError(t, err, "%s: the sandbox starts either way", tc.name)
		// As harness.CRI.CreateContainer, plus the user-specified image CRI-O
		// 1.36 wants for its signature policy (the kubelet sends it).
		_, err = cri.Runtime().CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: id,
			Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
				Image: &runtimeapi.ImageSpec{Image: harness.PauseImage, UserSpecifiedImage: harness.PauseImage}},
			SandboxConfig: cri.SandboxConfig(spec)})
		if tc.err == "" {
			assert.NoError(t, err, tc.name)
			continue
		}
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.err)
		t.Logf("CRI-O's CreateContainer error: %v", err)
	}
}

// crioWithNodeDropIn starts a CRI-O 1.36.3 daemon as the cluster harness
// sets it up (deploy/node's drop-in in its crio.conf.d, its own private NRI
// socket and dirs, the infra container dropped), stopped and checked for
// leftovers at the test's end.
func crioWithNodeDropIn(ctx context.Context, t *testing.T) *harness.CRIO {
	t.Helper()
	dir, err := os.MkdirTemp("", "crv") // short: unix socket paths
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := harness.StartCRIO(ctx, harness.CRIOOpts{Dir: dir, Tools: world.tools, CRIOBinDir: world.tools.CRIODir,
		DropInfra: true, PauseTar: world.pauseTar, DropIns: []string{filepath.Join(harness.RepoRoot(), node.CRIODropInRepoPath)}})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, c.Close(context.Background()))
		assert.Empty(t, c.Leftovers(), "left behind by crio")
	})
	return c
}

// hostTree makes a host-like root with files (paths relative to it) and an
// /etc directory.
func hostTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	for p, data := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(data), 0o644))
	}
	return root
}

// nodeSetup runs the nri-cni binary's node-setup on root; exit code and
// stdout+stderr.
func nodeSetup(t *testing.T, root string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(world.bin, append([]string{"node-setup", "--root", root}, args...)...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err, string(out))
	return 0, string(out)
}

// runtimeDump runs a runtime's config command with root/etc as /etc, in a
// private mount namespace; its stdout.
func runtimeDump(t *testing.T, root string, args ...string) string {
	t.Helper()
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$1" /etc && shift && exec "$@"`, "sh", filepath.Join(root, "etc")}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%v:\n%s", args, stderr.String())
	return string(out)
}

// crioKeys keeps the key lines of `crio config` (which prints keys at their
// default commented out, and 1.36.3 the validator's always), uncommented.
func crioKeys(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimPrefix(strings.TrimSpace(line), "# ")
		if strings.HasPrefix(l, "[") || strings.Contains(l, " = ") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// dumpDiff lists the keys whose value differs between two config texts of
// the same shape, as "table key: before -> after".
func dumpDiff(before, after string) []string {
	values := func(text string) (keys []string, vals map[string]string) {
		vals = map[string]string{}
		table := ""
		for _, line := range strings.Split(text, "\n") {
			l := strings.TrimSpace(line)
			if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") && !strings.Contains(l, " = ") {
				table = strings.Trim(l, "[]")
				continue
			}
			if k, v, ok := strings.Cut(l, " = "); ok {
				key := k
				if table != "" {
					key = table + " " + k
				}
				if _, seen := vals[key]; !seen {
					keys = append(keys, key)
				}
				vals[key] = v
			}
		}
		return keys, vals
	}
	keys, b := values(before)
	afterKeys, a := values(after)
	var diff []string
	for _, k := range keys {
		if a[k] != b[k] {
			diff = append(diff, fmt.Sprintf("%s: %s -> %s", k, b[k], a[k]))
		}
	}
	for _, k := range afterKeys {
		if _, ok := b[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: (none) -> %s", k, a[k]))
		}
	}
	return diff
}
