package oci

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
)

const (
	ctrID = "c0ffee01"
	sbxID = "5ab0c5ab"
)

// merged returns the union of maps, later ones winning (as runtimes add
// annotations to a spec one after the other).
func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// hostile are annotations a tenant puts on its pod to be taken for another.
var hostile = map[string]string{
	"io.kubernetes.cri.sandbox-namespace": "trusted",
	"io.kubernetes.cri.sandbox-name":      "victim",
	"io.kubernetes.cri.sandbox-uid":       "victim-uid",
	"io.kubernetes.cri.sandbox-id":        "forged-sandbox",
	"io.kubernetes.cri-o.SandboxID":       "forged-sandbox",
	"io.kubernetes.cri-o.Namespace":       "trusted",
	"io.kubernetes.cri-o.KubeName":        "victim",
	"io.kubernetes.pod.namespace":         "trusted",
	"io.kubernetes.pod.name":              "victim",
	"io.kubernetes.pod.uid":               "victim-uid",
}

// kubeletLabels are the labels the kubelet sets on a pod's sandbox and on
// each of its containers (over any pod label of the same key).
var kubeletLabels = map[string]string{
	"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "tenant", "io.kubernetes.pod.uid": "uid-web",
}

// CRI-O 1.36.3, sandbox container (server/sandbox_run_linux.go): its own
// keys, then the pod's annotations, then the CRI labels.
func crioSandbox(podAnn map[string]string) map[string]string {
	own := map[string]string{
		"io.container.manager": "cri-o", "io.kubernetes.cri-o.ContainerType": "sandbox",
		"io.kubernetes.cri-o.SandboxID": sbxID, "io.kubernetes.cri-o.ContainerID": sbxID,
		"io.kubernetes.cri-o.SandboxName": "k8s_web_tenant_uid-web_0", "io.kubernetes.cri-o.Namespace": "tenant",
		"io.kubernetes.cri-o.KubeName": "web",
	}
	return merged(own, podAnn, kubeletLabels)
}

// CRI-O 1.36.3, app container (internal/factory/container): the pod's
// annotations, then its own keys, then the container's annotations and
// labels (the kubelet's). As seen on the real runtime (TestCRIOHookIdentity).
func crioContainer(podAnn map[string]string) map[string]string {
	own := map[string]string{
		"io.container.manager": "cri-o", "io.kubernetes.cri-o.ContainerType": "container",
		"io.kubernetes.cri-o.SandboxID": sbxID, "io.kubernetes.cri-o.ContainerID": ctrID,
		"io.kubernetes.cri-o.SandboxName": "k8s_web_tenant_uid-web_0", "io.kubernetes.cri-o.Name": "k8s_app_web_tenant_uid-web_0",
	}
	return merged(podAnn, own, map[string]string{"io.kubernetes.container.name": "app"}, kubeletLabels)
}

// containerd 2.4.2 (internal/cri): the pod_annotations pass-through, then
// DefaultCRIAnnotations.
func containerdSpec(typ string, passedThrough map[string]string) map[string]string {
	return merged(passedThrough, map[string]string{
		"io.kubernetes.cri.container-type": typ, "io.kubernetes.cri.sandbox-id": sbxID,
		"io.kubernetes.cri.sandbox-name": "web", "io.kubernetes.cri.sandbox-namespace": "tenant",
		"io.kubernetes.cri.sandbox-uid": "uid-web",
	})
}

// podman 4.3.1 (seen here): a plain container, and a pod member.
var (
	podmanPlain = map[string]string{"io.container.manager": "libpod", "io.kubernetes.cri-o.Created": "2026-11-23T22:11:21Z",
		"io.kubernetes.cri-o.TTY": "false", "io.podman.annotations.autoremove": "TRUE"}
	podmanPodMember = merged(podmanPlain, map[string]string{"io.kubernetes.cri-o.ContainerType": "container",
		"io.kubernetes.cri-o.SandboxID": "2ae69898"})
)

func TestOCIIdentity(t *testing.T) {
	web := func(infra string) cni.PodIdentity {
		return cni.PodIdentity{Name: "web", Namespace: "tenant", UID: "uid-web", InfraID: infra}
	}
	custom := config.HookConfig{PodNameAnnotations: []string{"example.com/pod"}, PodNamespaceAnnotations: []string{"example.com/ns"}}
	tests := []struct {
		name    string
		ann     map[string]string
		hook    config.HookConfig
		want    cni.PodIdentity
		rules   string
		wantErr string
	}{
		{name: "CRI-O app container", ann: crioContainer(nil), want: web(sbxID), rules: identityCRIO},
		{name: "CRI-O app container, hostile pod", ann: crioContainer(hostile), want: web(sbxID), rules: identityCRIO},
		{name: "CRI-O sandbox container", ann: crioSandbox(nil), want: web(ctrID), rules: identityCRIO},
		{name: "CRI-O sandbox container, hostile pod overrides CRI-O's keys", ann: crioSandbox(hostile), want: web(ctrID), rules: identityCRIO},
		{name: "CRI-O sandbox container, pod claims an odd type",
			ann: crioSandbox(map[string]string{"io.kubernetes.cri-o.ContainerType": "infra"}), wantErr: `io.kubernetes.cri-o.ContainerType: "infra"`},
		{name: "CRI-O, pod adds containerd's type key",
			ann: crioContainer(merged(hostile, map[string]string{"io.kubernetes.cri.container-type": "sandbox"})), wantErr: "both present"},
		{name: "CRI-O app container without a sandbox id",
			ann: merged(crioContainer(nil), map[string]string{"io.kubernetes.cri-o.SandboxID": ""}), wantErr: "io.kubernetes.cri-o.SandboxID"},
		{name: "containerd sandbox", ann: containerdSpec("sandbox", nil), want: web(sbxID), rules: identityContainerd},
		{name: "containerd container, hostile pass-through",
			ann: containerdSpec("container", hostile), want: web(sbxID), rules: identityContainerd},
		{name: "containerd, pass-through of CRI-O's keys",
			ann:     containerdSpec("sandbox", map[string]string{"io.kubernetes.cri-o.SandboxName": "x", "io.kubernetes.pod.namespace": "trusted"}),
			wantErr: "both present"},
		{name: "podman container, node user's annotations",
			ann:  merged(podmanPlain, map[string]string{"io.kubernetes.cri.sandbox-namespace": "shop", "io.kubernetes.pod.name": "api"}),
			want: cni.PodIdentity{Name: "api", Namespace: "shop", InfraID: ctrID}, rules: identityGeneric},
		{name: "podman pod member", ann: podmanPodMember,
			want: cni.PodIdentity{Name: ctrID, Namespace: "default", InfraID: "2ae69898"}, rules: identityGeneric},
		{name: "runc, no annotations", ann: nil,
			want: cni.PodIdentity{Name: ctrID, Namespace: "default", InfraID: ctrID}, rules: identityGeneric},
		{name: "runc, configured keys", hook: custom,
			ann:  map[string]string{"example.com/pod": "db", "example.com/ns": "data", "io.kubernetes.cri.sandbox-namespace": "other"},
			want: cni.PodIdentity{Name: "db", Namespace: "data", InfraID: ctrID}, rules: identityGeneric},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hc := tc.hook
			if hc.PodNameAnnotations == nil {
				hc = config.DefaultHookConfig()
			}
			got, rules, err := ociIdentity(ctrID, tc.ann, hc)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, ErrIdentity)
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.rules, rules)
		})
	}
}

// TestOCIHookCRIOPodCannotNameItself: under CRI-O a pod in "tenant" that
// claims to be in "trusted" gets nothing from a namespaces.include: [trusted]
// filter; a pod really there is attached under its own name.
func TestOCIHookCRIOPodCannotNameItself(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Reconfigure(func(c *config.Config) { c.Namespaces.Include = []string{"trusted"} })
	run := func(id string, ann map[string]string, stage string) error {
		data, err := json.Marshal(specs.State{ID: id, Pid: 77, Status: specs.StateCreating, Bundle: bundle(t, ann, "new")})
		require.NoError(t, err)
		h := &OCIHook{Mgr: f.Mgr, Hook: config.DefaultHookConfig(), Stdin: strings.NewReader(string(data)),
			Log: logrus.NewEntry(logrus.New())}
		return h.Run(context.Background(), stage)
	}

	require.NoError(t, run(ctrID, crioContainer(hostile), StageCreateRuntime))
	assert.Empty(t, f.Calls(), "the tenant's pod gets no network")

	trusted := crioContainer(nil)
	trusted["io.kubernetes.pod.namespace"] = "trusted"
	require.NoError(t, run("c2", trusted, StageCreateRuntime))
	calls := f.Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, "IgnoreUnknown=1;K8S_POD_NAMESPACE=trusted;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID="+sbxID+";K8S_POD_UID=uid-web", calls[0].Args)

	// Both runtimes' keys: refused at create, and poststop still cleans up.
	both := merged(trusted, map[string]string{"io.kubernetes.cri.container-type": "sandbox"})
	err := run("c3", both, StageCreateRuntime)
	require.ErrorIs(t, err, ErrIdentity)
	assert.ErrorContains(t, err, "container c3")
	require.NoError(t, run("c3", both, StagePoststop))
	assert.Len(t, f.Calls(), 1, "nothing attached for c3")
}
