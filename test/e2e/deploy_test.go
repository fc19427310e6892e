package e2e

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

// The node paths the DaemonSet uses; the tests must leave them untouched.
var deployHostPaths = []string{"/etc/nri-cni", "/var/run/nri", "/var/lib/nri-cni", "/var/lib/cni", "/opt/cni/bin", "/etc/cni"}

var deployImg struct {
	once sync.Once
	res  build.Result
	err  error
}

// deployImage builds the image once, through the code path `make image` uses.
func deployImage(t *testing.T) build.Result {
	t.Helper()
	deployImg.once.Do(func() {
		dir := filepath.Join(world.dir, "image")
		deployImg.res, deployImg.err = build.Build(context.Background(), build.Options{
			RepoRoot: harness.RepoRoot(), Out: filepath.Join(dir, "nri-cni-image.tar"), Tag: build.DefaultTag,
			Version: harness.RandomName("e2e-"), BinOut: filepath.Join(dir, "nri-cni"), CNIDir: world.tools.CNIDir,
		})
	})
	require.NoError(t, deployImg.err)
	return deployImg.res
}

func ctrCmd(ctx context.Context, ns string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(world.tools.ContainerdDir, "ctr"),
		append([]string{"--address", world.ctd.Address, "-n", ns}, args...)...)
}

func TestDeployImage(t *testing.T) {
	testenv.RequireRoot(t)
	img := deployImage(t) // built first: under load the build alone can take minutes
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "nri-cni-e2e"
	t.Cleanup(func() {
		out, _ := ctrCmd(context.Background(), ns, "images", "ls", "-q").Output()
		for _, ref := range strings.Fields(string(out)) {
			_ = ctrCmd(context.Background(), ns, "images", "rm", "--sync", ref).Run()
		}
		_ = ctrCmd(context.Background(), "k8s.io", "images", "rm", "--sync", img.Tag).Run()
	})

	// What `kind load image-archive` runs on each node (stdin: the archive).
	tarData, err := os.ReadFile(img.Out)
	require.NoError(t, err)
	imp := ctrCmd(ctx, ns, "images", "import", "--all-platforms", "--digests", "-")
	imp.Stdin = bytes.NewReader(tarData)
	out, err := imp.CombinedOutput()
	require.NoError(t, err, "ctr images import: %s", out)
	// ... and into the CRI namespace, where the kubelet looks.
	require.NoError(t, harness.ImportImage(ctx, filepath.Join(world.tools.ContainerdDir, "ctr"), world.ctd.Address, img.Out))
	out, err = ctrCmd(ctx, "k8s.io", "images", "ls", "-q").CombinedOutput()
	require.NoError(t, err)
	assert.Contains(t, strings.Fields(string(out)), img.Tag)

	image, err := build.ReadArchive(img.Out, img.Tag)
	require.NoError(t, err)
	cfg, err := image.ConfigFile()
	require.NoError(t, err)
	entry := cfg.Config.Entrypoint
	run := func(mounts []string, args ...string) (string, error) {
		// ctr's trailing args replace the whole argv, so the entrypoint leads.
		// Its own cgroup, which goes with it (ctr's default, /<namespace>/<id>,
		// leaves /<namespace> behind).
		id := harness.RandomName("ncimg")
		a := append([]string{"run", "--rm", "--cgroup", "/" + id}, mounts...)
		a = append(append(a, img.Tag, id), slices.Concat(entry, args)...)
		cmd := ctrCmd(ctx, ns, a...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr // ctr's own warnings
		b, err := cmd.Output()
		return string(b) + stderr.String(), err
	}
	out2, err := run(nil, "version")
	require.NoError(t, err, out2)
	assert.Equal(t, "nri-cni "+img.Version+" (with Kubernetes mode)", strings.SplitN(out2, "\n", 2)[0], "-X …/cli.version reached the image's binary, nri-cni-k8s")

	dst := t.TempDir()
	out2, err = run([]string{"--mount", "type=bind,src=" + dst + ",dst=/out,options=rbind:rw"},
		"install-plugins", "--from", build.PluginDir, "--to", "/out", "bridge")
	require.NoError(t, err, out2)
	st, err := os.Stat(filepath.Join(dst, "bridge"))
	require.NoError(t, err, out2)
	assert.Equal(t, fs.FileMode(0o755), st.Mode().Perm())
	assert.Equal(t, deploy.FileSum(filepath.Join(world.tools.CNIDir, "bridge")), deploy.FileSum(filepath.Join(dst, "bridge")))
}

// TestDeployKindPatch feeds kind-config.yaml's containerd patch to
// containerd 2.x, merged into a version 2 config (what kind's node image
// ships) and a version 3 one, and reads back what containerd made of it.
func TestDeployKindPatch(t *testing.T) {
	testenv.RequireRoot(t)
	k, err := deploy.LoadKindConfig(harness.RepoRoot())
	require.NoError(t, err)
	require.Len(t, k.ContainerdConfigPatches, 1)
	dir := t.TempDir()
	for name, base := range deploy.KindBaseConfigs(dir) {
		for _, patched := range []bool{false, true} {
			text := base
			if patched {
				text += "\n" + k.ContainerdConfigPatches[0] + "\n"
			}
			dump, err := deploy.ContainerdConfigDump(filepath.Join(world.tools.ContainerdDir, "containerd"), dir, name, text)
			require.NoError(t, err)
			nri := deploy.TOMLTable(dump, "plugins.'io.containerd.nri.v1.nri'")
			validator := deploy.TOMLTable(dump, "plugins.'io.containerd.nri.v1.nri'.default_validator")
			assert.Contains(t, nri, "disable = false", name)
			// The patch leaves containerd's defaults for the socket and
			// timeouts (backgroundAttach answers RunPodSandbox at once).
			assert.Contains(t, nri, "plugin_request_timeout = '2s'", "%s patched=%t:\n%s", name, patched, nri)
			assert.Contains(t, nri, "socket_path = '/var/run/nri/nri.sock'", name)
			wantValidator := "enable = false"
			if patched {
				wantValidator = "enable = true"
			}
			// Fail-closed per pod (required-plugins.noderesource.dev): the
			// validator on, no node-wide list.
			assert.Contains(t, validator, wantValidator, "%s patched=%t:\n%s", name, patched, validator)
			assert.Contains(t, validator, "required_plugins = []", "%s patched=%t", name, patched)
		}
	}
}

// TestDeployDaemonSetArgs runs the DaemonSet's containers the way a node
// would, minus the kubelet: the image's filesystem as root, the manifest's
// volume mounts (test directories standing in for the node's paths, the
// e2e containerd's NRI socket and netns dir wired in), the init container,
// then the exact args. An annotated pod gets net1 from the ConfigMap's
// chain; a pod in kube-system does not; SIGTERM ends the plugin.
func TestDeployDaemonSetArgs(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	img := deployImage(t)
	b, err := deploy.LoadBase(harness.RepoRoot())
	require.NoError(t, err)
	bridge, subnet := harness.RandomName("ncdp"), harness.RandomSubnet(200)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	netName, err := b.RewriteBridge("10-secondary.conflist", bridge, subnet)
	require.NoError(t, err)
	// No API server in this tier: the shipped config without its kubernetes
	// section (test/k8s runs it whole, on a real API server and kubelet).
	require.NoError(t, b.EditConfig(func(conf map[string]any) error {
		require.Contains(t, conf, "kubernetes", "deploy/base ships Kubernetes mode on")
		delete(conf, "kubernetes")
		return nil
	}))
	before := deploy.Snapshot(deployHostPaths...)
	t.Cleanup(func() { assertHostUntouched(t, before, netName) })
	_, secondary, _ := net.ParseCIDR(subnet)

	dir := t.TempDir()
	node := deploy.Node{HostDir: filepath.Join(dir, "node"), VolumeDir: filepath.Join(dir, "vol"), RootFS: filepath.Join(dir, "rootfs")}
	image, err := build.ReadArchive(img.Out, img.Tag)
	require.NoError(t, err)
	require.NoError(t, build.Extract(image, node.RootFS))
	imgCfg, err := image.ConfigFile()
	require.NoError(t, err)
	entry := imgCfg.Config.Entrypoint
	require.NoError(t, node.PrepareVolumes(b))

	cri := dialCRI(ctx, t, world.ctd.Address)
	t.Cleanup(func() { cri.Close() })
	netnsDir := shareNetnsDir(t, ctx, cri)

	// The init container: plugins into the node's /opt/cni/bin.
	ic := b.Container(deploy.InitContainerName)
	mounts, err := node.ContainerMounts(b, ic)
	require.NoError(t, err)
	for i := 0; i < 2; i++ { // a restarted pod runs it again
		out, err := node.Command(ctx, append(node.RuntimeMounts(), mounts...), slices.Concat(entry, ic.Args)).CombinedOutput()
		require.NoError(t, err, "init container: %s", out)
	}
	for _, p := range build.Plugins {
		assert.Equal(t, deploy.FileSum(filepath.Join(world.tools.CNIDir, p)), deploy.FileSum(node.HostPath("/opt/cni/bin/"+p)), p)
	}

	// The plugin container, with the e2e containerd's socket and netns dir.
	c := b.Container(deploy.ContainerName)
	mounts, err = node.PluginMounts(b, c, world.ctd.NRISocket, netnsDir)
	require.NoError(t, err)
	logPath := filepath.Join(dir, "nri-cni.log")
	logf, err := os.Create(logPath)
	require.NoError(t, err)
	defer logf.Close()
	cmd := node.Command(context.Background(), mounts, slices.Concat(entry, c.Args))
	cmd.Stdout, cmd.Stderr = logf, logf
	synced := world.ctd.CountLog(harness.PluginSynced("10-nri-cni"))
	plugin, err := deploy.Start(cmd)
	require.NoError(t, err)
	var pods []string
	t.Cleanup(func() { // pods first (nri-cni tears them down), then the plugin
		cleanupPods(t, world.ctd.Address)
		plugin.Kill()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("nri-cni output:\n%s\ncontainerd log tail:\n%s", data, world.ctd.LogTail(30))
		}
	})
	waitCtx, stopWait := plugin.Until(ctx) // gives up early if the plugin exits
	defer stopWait()
	require.NoError(t, world.ctd.WaitLog(waitCtx, harness.PluginSynced("10-nri-cni"), synced+1, 20*time.Second))
	comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(plugin.Pid()), "comm"))
	require.Equal(t, "nri-cni-k8s", strings.TrimSpace(string(comm)), "the pid we signal is nri-cni-k8s itself")

	// The liveness probe, as the kubelet would exec it in the container.
	probe := c.LivenessProbe.Exec.Command
	var probeOut []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if probeOut, err = exec.CommandContext(ctx, "chroot", append([]string{node.RootFS}, probe...)...).CombinedOutput(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err, "liveness probe %q: %s", probe, probeOut)

	// An annotated pod in a namespace that is not excluded gets net1 from
	// the ConfigMap's chain (tuning sets the MAC it asks for).
	const mac = "02:00:00:5e:d1:01"
	run := func(name, ns string) (string, *harness.PodStatus) {
		id, err := cri.RunPod(ctx, harness.PodSpec{Name: name, Namespace: ns, UID: harness.RandomName("uid-"),
			Annotations: map[string]string{"nri-cni.io/networks": netName, "nri-cni.io/mac": mac}})
		if id != "" {
			pods = append(pods, id)
		}
		require.NoError(t, err)
		st, err := cri.PodStatus(ctx, id)
		require.NoError(t, err)
		return id, st
	}
	id, st := run("deploy-net1", "e2e-deploy")
	// deploy/base attaches in the background (backgroundAttach): a sandbox
	// without containers, as here, gets net1 moments after RunPodSandbox
	// answered (a container would wait for it at CreateContainer). The
	// chain's ADD is over when libcni caches its result: net1 appears
	// earlier, before the chain has set its MAC.
	cachedResult := func() []string {
		m, _ := filepath.Glob(node.HostPath("/var/lib/cni/results/" + netName + "-" + id + "-*"))
		return m
	}
	testenv.Eventually(t, 30*time.Second, "the attach's libcni cache entry", func() bool { return len(cachedResult()) > 0 })
	itf, ok, err := harness.PodIface(st.NetnsPath, "net1")
	require.NoError(t, err)
	require.True(t, ok, "net1 in the pod")
	require.Len(t, itf.Addrs, 1)
	assert.True(t, secondary.Contains(itf.Addrs[0].IP), "%s in %s", itf.Addrs[0].IP, subnet)
	assert.Equal(t, mac, itf.MAC)
	ipFiles := func() []string {
		m, _ := filepath.Glob(node.HostPath("/var/lib/cni/networks/" + netName + "/*.*.*.*"))
		return m
	}
	assert.Len(t, ipFiles(), 1, "host-local allocated under the node's /var/lib/cni")
	assert.Len(t, cachedResult(), 1, "libcni cache under the node's /var/lib/cni")
	records, _ := filepath.Glob(node.HostPath("/var/lib/nri-cni/*.json"))
	assert.Len(t, records, 1, "record under the node's /var/lib/nri-cni")
	assertHostUntouched(t, before, netName)

	_, sysSt := run("deploy-sys", "kube-system")
	// What must not happen would happen in the background, moments after
	// RunPodSandbox answered: give it the time net1 took above, and more.
	time.Sleep(2 * time.Second)
	_, ok, err = harness.PodIface(sysSt.NetnsPath, "net1")
	require.NoError(t, err)
	assert.False(t, ok, "kube-system is excluded by the ConfigMap")

	// Opt-in only (requireAnnotation): a pod that does not ask gets nothing.
	plainID, err := cri.RunPod(ctx, harness.PodSpec{Name: "deploy-plain", Namespace: "e2e-deploy", UID: harness.RandomName("uid-")})
	require.NoError(t, err)
	pods = append(pods, plainID)
	plainSt, err := cri.PodStatus(ctx, plainID)
	require.NoError(t, err)
	time.Sleep(2 * time.Second) // as above
	_, ok, err = harness.PodIface(plainSt.NetnsPath, "net1")
	require.NoError(t, err)
	assert.False(t, ok, "an unannotated pod gets no secondary network")

	for _, id := range pods {
		require.NoError(t, cri.StopPod(ctx, id))
		require.NoError(t, cri.RemovePod(ctx, id))
	}
	pods = nil
	assert.Empty(t, ipFiles(), "the address is released")
	records, _ = filepath.Glob(node.HostPath("/var/lib/nri-cni/*.json"))
	assert.Empty(t, records)

	require.NoError(t, plugin.Terminate(10*time.Second), "nri-cni exits cleanly on SIGTERM")
}

// shareNetnsDir finds where the e2e containerd pins pod netns (from a
// throwaway pod) and makes that directory a shared mount, so pins made
// later propagate into the plugin's mount namespace, as HostToContainer
// does on a node. Undone at cleanup.
func shareNetnsDir(t *testing.T, ctx context.Context, cri *harness.CRI) string {
	id, err := cri.RunPod(ctx, harness.PodSpec{Name: "deploy-probe", Namespace: "e2e-deploy", UID: harness.RandomName("uid-")})
	require.NoError(t, err)
	st, err := cri.PodStatus(ctx, id)
	require.NoError(t, errors.Join(err, cri.StopPod(ctx, id), cri.RemovePod(ctx, id)))
	dir := filepath.Dir(st.NetnsPath)
	undo, err := deploy.ShareMount(dir)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, undo()) })
	return dir
}

// assertHostUntouched compares the host's node paths with before. The
// host's /var/lib/cni is also every containerd's own CNI cache (the e2e
// one's eth0 entries, other test runs'): there only entries of nri-cni's
// network count.
func assertHostUntouched(t *testing.T, before map[string]string, netName string) {
	for _, p := range deploy.Changed(before, deploy.Snapshot(deployHostPaths...)) {
		if strings.HasPrefix(p, "/var/lib/cni/") && !strings.Contains(p, netName) {
			continue
		}
		t.Errorf("host path %s was created, changed or removed", p)
	}
}
