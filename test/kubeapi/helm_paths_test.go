package kubeapi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/nri-cni/nri-cni/test/deploy"
)

// TestHelmTemplateNodePaths: every node path the chart mounts can be set
// (hostPaths, kubernetes.primaryConfDir, kubernetes.kubeconfig), and each
// override lands everywhere the path is named: the hostPath volume, the
// mount at the same path in the container, nri.conf (binDirs, cacheDir,
// stateDir, failClosed.hookSocket and hookPath, kubernetes.primaryConfDir
// and kubeconfig), the --socket argument and the init containers' targets.
// kubernetes.nodeName lands in nri.conf. With the defaults the chart renders
// deploy/base's pod (TestHelmTemplateMatchesBase).
func TestHelmTemplateNodePaths(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(valuesFile, []byte(`
hostPaths:
  nriSocket: /run/containerd/nri/nri-main.sock
  netns: /run/netns
  cniBin: /home/kubernetes/bin/
  cniCache: /var/lib/cni-secondary
  state: /data/nri-cni/state
  run: /run/nri-cni
  hookBin: /usr/libexec/nri-cni
kubernetes:
  kubeconfig: /etc/nri-cni/node.kubeconfig
  nodeName: worker-7
  primaryConfDir: /etc/kubernetes/cni/net.d
`), 0o644))
	o := h.template(ctx, t, "kube-system", "-f", valuesFile)
	b := &deploy.Base{Objects: *o}
	cfg := parseConf(t, o.ConfigMap.Data[deploy.ConfigKey])

	assert.Equal(t, []string{"/home/kubernetes/bin"}, cfg.BinDirs, "binDirs (cleaned)")
	assert.Equal(t, "/var/lib/cni-secondary", cfg.CacheDir)
	assert.Equal(t, "/data/nri-cni/state", cfg.StateDir)
	assert.Equal(t, "/run/nri-cni/await.sock", cfg.FailClosed.HookSocket)
	assert.Equal(t, "/usr/libexec/nri-cni/nri-cni", cfg.FailClosed.HookPath)
	require.NotNil(t, cfg.Kubernetes)
	assert.Equal(t, "/etc/nri-cni/node.kubeconfig", cfg.Kubernetes.Kubeconfig)
	assert.Equal(t, "worker-7", cfg.Kubernetes.NodeName)
	assert.Equal(t, "/etc/kubernetes/cni/net.d", cfg.Kubernetes.PrimaryConfDir)
	assert.Equal(t, "/etc/nri-cni/net.d", cfg.ConfDir, "confDir is the ConfigMap's mount, inside the container")

	c := b.Container(deploy.ContainerName)
	require.NotNil(t, c)
	socket := flagArg(t, c.Args, "--socket")
	assert.Equal(t, "/run/containerd/nri/nri-main.sock", socket)

	// Each path is on a hostPath volume of the same node path (mounted where
	// the node has it), writable or read only as nri-cni uses it.
	for _, p := range []struct {
		what, path string
		readOnly   bool
		hostType   corev1.HostPathType
	}{
		{"binDirs", cfg.BinDirs[0], true, corev1.HostPathDirectoryOrCreate},
		{"cacheDir", cfg.CacheDir, false, corev1.HostPathDirectoryOrCreate},
		{"stateDir", cfg.StateDir, false, corev1.HostPathDirectoryOrCreate},
		{"--socket", socket, false, corev1.HostPathDirectoryOrCreate},
		{"a pinned netns", "/run/netns/cni-1234", false, corev1.HostPathDirectoryOrCreate},
		{"failClosed.hookSocket", cfg.FailClosed.HookSocket, false, corev1.HostPathDirectoryOrCreate},
		{"kubernetes.primaryConfDir", cfg.Kubernetes.PrimaryConfDir, true, corev1.HostPathDirectoryOrCreate},
		{"kubernetes.kubeconfig", cfg.Kubernetes.Kubeconfig, true, corev1.HostPathFile},
	} {
		m := deploy.MountFor(c, p.path)
		require.NotNil(t, m, "%s %s is on no mount", p.what, p.path)
		v := b.Volume(m.Name)
		require.NotNil(t, v, "%s: mount %s names no volume", p.what, m.Name)
		require.NotNil(t, v.HostPath, "%s: a hostPath volume", p.what)
		assert.Equal(t, v.HostPath.Path, m.MountPath, "%s: mounted at its node path", p.what)
		assert.True(t, deploy.Covers(v.HostPath.Path, p.path), "%s: %s is under %s", p.what, p.path, v.HostPath.Path)
		assert.Equal(t, p.readOnly, m.ReadOnly, "%s: read only", p.what)
		require.NotNil(t, v.HostPath.Type, p.what)
		assert.Equal(t, p.hostType, *v.HostPath.Type, p.what)
	}
	assert.Equal(t, filepath.Dir(socket), deploy.MountFor(c, socket).MountPath, "the socket's directory, not the socket")
	assert.Equal(t, "/etc/kubernetes/cni", deploy.MountFor(c, cfg.Kubernetes.PrimaryConfDir).MountPath,
		"primaryConfDir's parent: the runtime may create net.d later")

	// The init containers install where nri.conf looks.
	for name, want := range map[string]string{deploy.InitContainerName: cfg.BinDirs[0], "install-hook": filepath.Dir(cfg.FailClosed.HookPath)} {
		ic := b.Container(name)
		require.NotNil(t, ic, name)
		to := flagArg(t, ic.Args, "--to")
		m := deploy.MountFor(ic, to)
		require.NotNil(t, m, "%s: --to %s is on no mount", name, to)
		assert.Equal(t, want, b.Volume(m.Name).HostPath.Path, "%s installs into the node's %s", name, want)
	}

	// Without Kubernetes mode the kubeconfig is neither written nor mounted.
	off := h.template(ctx, t, "kube-system", "-f", valuesFile, "--set", "kubernetes.enabled=false")
	assert.Nil(t, parseConf(t, off.ConfigMap.Data[deploy.ConfigKey]).Kubernetes)
	assert.Nil(t, (&deploy.Base{Objects: *off}).Volume("kubeconfig"))

	for set, want := range map[string]string{
		"hostPaths.cniBin=opt/cni/bin":        `hostPaths.cniBin: "opt/cni/bin" is not an absolute path other than /`,
		"hostPaths.state=/":                   `hostPaths.state: "/" is not an absolute path other than /`,
		"hostPaths.netns=null":                `hostPaths.netns: must be set`,
		"hostPaths.etcDir=/etc":               `hostPaths.etcDir: not a path the chart mounts`,
		"kubernetes.primaryConfDir=/net.d":    `kubernetes.primaryConfDir's directory: "/" is not an absolute path other than /`,
		"kubernetes.kubeconfig=my.kubeconfig": `kubernetes.kubeconfig: "my.kubeconfig" is not an absolute path`,
	} {
		_, err := h.run(ctx, "template", "nri-cni", ChartDir(), "--set", set)
		if assert.Error(t, err, set) {
			assert.Contains(t, err.Error(), want, set)
		}
	}
}

// flagArg is the value after flag in args.
func flagArg(t *testing.T, args []string, flag string) string {
	t.Helper()
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("no %s in %q", flag, args)
	return ""
}
