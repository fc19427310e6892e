package k8sdeploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
)

// The overlay's DaemonSet patch, against the shipped deploy/base (no root):
// every hostPath gets its private stand-in, the metrics address and the
// netns mount move, every container is imagePullPolicy Never.
func TestDaemonSetOps(t *testing.T) {
	b, err := deploy.LoadBase(harness.RepoRoot())
	require.NoError(t, err)
	o := &Overlay{MetricsAddr: "127.0.0.1:1", StateDir: "/s", CacheDir: "/c", CNIBin: "/b", CNIConf: "/f", NRIDir: "/n", NetnsDir: "/x", HostRoot: "/hr", RunDir: "/r", HookBin: "/h",
		KubeletDir: "/k"}
	ops, err := daemonSetOps(b, o)
	require.NoError(t, err)
	got := map[string]any{}
	for _, op := range ops {
		assert.Equal(t, "replace", op.Op, op.Path)
		got[op.Path] = op.Value
	}
	ps := b.DaemonSet.Spec.Template.Spec
	for i, v := range ps.Volumes {
		if v.HostPath == nil {
			continue
		}
		to := got[fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i)]
		if rest, ok := strings.CutPrefix(v.HostPath.Path, "/var/lib/kubelet/"); ok {
			assert.Equal(t, "/k/"+rest, to, v.Name)
			continue
		}
		assert.Contains(t, []any{"/s", "/c", "/b", "/f", "/n", "/x", "/hr", "/r", "/h"}, to, v.Name)
	}
	for i, c := range ps.Containers {
		assert.Equal(t, "Never", got[fmt.Sprintf("/spec/template/spec/containers/%d/imagePullPolicy", i)], c.Name)
	}
	for i, c := range ps.InitContainers {
		assert.Equal(t, "Never", got[fmt.Sprintf("/spec/template/spec/initContainers/%d/imagePullPolicy", i)], c.Name)
	}
	assert.Contains(t, valuesOf(got), "127.0.0.1:1", "metrics address")
	assert.Contains(t, valuesOf(got), "/x", "netns mount path")
	for i, c := range ps.Containers {
		for k, m := range c.VolumeMounts {
			if rest, ok := strings.CutPrefix(m.MountPath, "/var/lib/kubelet/"); ok {
				assert.Equal(t, "/k/"+rest, got[fmt.Sprintf("/spec/template/spec/containers/%d/volumeMounts/%d/mountPath", i, k)],
					"%s: the DRA sockets at the node's path", m.Name)
			}
		}
	}
}

func TestKubeletPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/var/lib/kubelet", "/k"},
		{"/var/lib/kubelet/plugins", "/k/plugins"},
		{"/var/lib/kubelet/plugins_registry", "/k/plugins_registry"},
		{"/var/lib/kubeletx", ""},
		{"/var/lib/cni", ""},
	} {
		assert.Equal(t, tc.want, kubeletPath(tc.in, "/k"), tc.in)
	}
}

func valuesOf(m map[string]any) []any {
	var out []any
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func TestFlagValue(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
		want int
	}{
		{[]string{"run", "--metrics-addr", "x"}, "--metrics-addr", 2},
		{[]string{"run", "--metrics-addr"}, "--metrics-addr", -1},
		{[]string{"run"}, "--addr", -1},
	} {
		assert.Equal(t, tc.want, flagValue(tc.args, tc.flag), "%v %s", tc.args, tc.flag)
	}
}

// The overlay refuses a base it cannot isolate rather than deploying
// something that touches the host or that the kubelet would kill.
func TestDaemonSetOpsRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		change     func(*deploy.Base)
	}{
		{"unknown hostPath", "hostPath /var/run/other (volume extra) has no private stand-in", func(b *deploy.Base) {
			ps := &b.DaemonSet.Spec.Template.Spec
			ps.Volumes = append(ps.Volumes, corev1.Volume{Name: "extra",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/other"}}})
		}},
		{"no metrics address", "has no --metrics-addr", func(b *deploy.Base) {
			b.Container(deploy.ContainerName).Args = []string{"run"}
		}},
		{"no liveness probe", "has no exec liveness probe", func(b *deploy.Base) {
			b.Container(deploy.ContainerName).LivenessProbe = nil
		}},
		{"probe without --addr", "liveness probe has no --addr", func(b *deploy.Base) {
			b.Container(deploy.ContainerName).LivenessProbe.Exec.Command = []string{"/usr/local/bin/nri-cni-k8s", "healthz"}
		}},
		{"no readiness probe", "has no exec readiness probe", func(b *deploy.Base) {
			b.Container(deploy.ContainerName).ReadinessProbe = nil
		}},
		{"readiness probe without --addr", "readiness probe has no --addr", func(b *deploy.Base) {
			b.Container(deploy.ContainerName).ReadinessProbe.Exec.Command = []string{"/usr/local/bin/nri-cni-k8s", "healthz", "--ready"}
		}},
		{"no nri-cni container", "no container " + deploy.ContainerName, func(b *deploy.Base) {
			b.Container(deploy.ContainerName).Name = "other"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := deploy.LoadBase(harness.RepoRoot())
			require.NoError(t, err)
			tc.change(b)
			_, err = daemonSetOps(b, &Overlay{MetricsAddr: "127.0.0.1:1"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// What `kubectl kustomize` printed is decoded strictly and must hold every
// kind the base ships.
func TestDecodeRendered(t *testing.T) {
	b, err := deploy.LoadBase(harness.RepoRoot())
	require.NoError(t, err)
	var files []string
	for _, r := range b.Kustomization.Resources {
		data, err := os.ReadFile(filepath.Join(b.Dir, r))
		require.NoError(t, err)
		files = append(files, string(data))
	}
	all := strings.Join(files, "\n---\n")
	var noSA []string // every file but the ServiceAccount's
	for _, f := range files {
		if !strings.Contains(f, "\nkind: ServiceAccount\n") {
			noSA = append(noSA, f)
		}
	}
	require.Len(t, noSA, len(files)-1)
	for _, tc := range []struct {
		name, out, want string
	}{
		{"every kind", all, ""},
		{"a kind missing", strings.Join(files[1:], "\n---\n"), "no "},
		{"a kind twice", all + "\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\n", "a second ServiceAccount"},
		{"an unknown field", strings.Join(noSA, "\n---\n") + "\n---\napiVersion: v1\nkind: ServiceAccount\nbogus: 1\n",
			`unknown field "bogus"`},
		{"not YAML", "kind: [", "document 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeRendered(&deploy.Base{Dir: b.Dir}, tc.out)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// editDevices points nri-cni at the kubelet's PodResources socket and the
// overlay's device-info dir, and its namespace rule lets a cni-recorder
// NAD that writes under RecordDir through the node's policy (and nothing
// else: not another namespace, not a record file elsewhere).
func TestEditDevices(t *testing.T) {
	o := &Overlay{RecordDir: "/tmp/k8st1/deploy/node/records", DeviceInfoDir: "/tmp/k8st1/deploy/node/devinfo",
		PodResourcesSocket: "/tmp/k8st1/c/kubelet/pod-resources/kubelet.sock"}
	b, err := deploy.LoadBase(harness.RepoRoot())
	require.NoError(t, err)
	var k map[string]any
	require.NoError(t, b.EditConfig(func(conf map[string]any) error {
		k, _ = conf["kubernetes"].(map[string]any)
		return o.editDevices(conf)
	}))
	_, err = config.Parse([]byte(b.ConfigMap.Data[deploy.ConfigKey]))
	require.NoError(t, err, "the edited nri.conf is valid")
	assert.Equal(t, o.PodResourcesSocket, k["podResourcesSocket"])
	assert.Equal(t, o.DeviceInfoDir, k["deviceInfoDir"])
	require.NotEmpty(t, o.DevicesNamespace)

	data, err := json.Marshal(k["nadPolicy"])
	require.NoError(t, err)
	var np config.NADPolicy
	require.NoError(t, json.Unmarshal(data, &np))
	p, err := nadpolicy.New(&np)
	require.NoError(t, err)
	nad := func(record string) []byte {
		return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"cni-dev","plugins":[{"type":%q,"recordFile":%q,"moveDevice":true}]}`,
			RecorderType, record))
	}
	assert.NoError(t, p.Check(o.DevicesNamespace, nad(o.RecordDir+"/calls.jsonl")))
	assert.ErrorIs(t, p.Check("default", nad(o.RecordDir+"/calls.jsonl")), nadpolicy.ErrRefused, "another namespace")
	assert.ErrorIs(t, p.Check(o.DevicesNamespace, nad("/tmp/elsewhere/calls.jsonl")), nadpolicy.ErrRefused, "a record file elsewhere")

	assert.Error(t, (&Overlay{}).editDevices(map[string]any{"kubernetes": map[string]any{}}), "no nadPolicy")
}
