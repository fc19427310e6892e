package kube

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	nadfake "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned/fake"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// fakeDRAEngine is a DRAEngine over a list of networks: a plugin type in
// missing has no binary, a network in notReady said so at its STATUS.
type fakeDRAEngine struct {
	nets     []*cni.Network
	missing  map[string]bool
	notReady map[string]bool
}

func (e fakeDRAEngine) Networks() []*cni.Network { return e.nets }
func (e fakeDRAEngine) FindPlugin(typ string) (string, error) {
	if e.missing[typ] {
		return "", errors.New("no such plugin")
	}
	return "/opt/cni/bin/" + typ, nil
}
func (e fakeDRAEngine) NetworkStatus(context.Context, *cni.Network) error { return nil }
func (e fakeDRAEngine) NotReady(name string) error {
	if e.notReady[name] {
		return errors.New("STATUS: not ready")
	}
	return nil
}
func (e fakeDRAEngine) CheckClaim(state.ClaimDevice) error { return nil }

func localNet(t *testing.T, name, typ string) *cni.Network {
	t.Helper()
	list, err := libcni.NetworkConfFromBytes([]byte(`{"cniVersion":"1.0.0","name":"` + name + `","plugins":[{"type":"` + typ + `"}]}`))
	require.NoError(t, err)
	return &cni.Network{Name: name, List: list}
}

// StartDRA publishes what the engine it is handed (its own interface, not
// the Manager) says: the config dir's networks whose plugins exist and
// whose STATUS is ready; the others are reported as skipped.
func TestStartDRAPublishesTheEnginesNetworks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	core := fake.NewClientset()
	clients := &Clients{Core: core, NAD: nadfake.NewSimpleClientset(), NodeName: "node-a"}
	mode := Start(ctx, clients, quietLog(), Options{Recorder: record.NewFakeRecorder(100)})
	eng := fakeDRAEngine{
		nets:     []*cni.Network{localNet(t, "alpha", "bridge"), localNet(t, "beta", "sriov"), localNet(t, "gamma", "macvlan")},
		missing:  map[string]bool{"sriov": true},
		notReady: map[string]bool{"gamma": true},
	}
	cfg := config.Default()
	cfg.Kubernetes = &config.KubernetesConfig{DRA: &config.DRAConfig{Enabled: true, KubeletDir: t.TempDir(), NADs: ptr.To(false)}}
	drv, err := StartDRA(ctx, DRANode{Config: cfg, Clients: clients, Mode: mode, Engine: eng, Log: quietLog(),
		PublishOnly: true, LinkExists: func(string) error { return nil }})
	require.NoError(t, err)
	inv := drv.Published()
	var published []string
	for _, n := range inv.DeviceNetwork {
		published = append(published, n)
	}
	assert.ElementsMatch(t, []string{"alpha"}, published, "only the network whose plugins exist and are ready")
	skipped := map[string]string{}
	for _, s := range inv.Skipped {
		skipped[s.Network] = s.Reason
	}
	assert.Contains(t, skipped["beta"], "sriov")
	assert.Contains(t, skipped["gamma"], "not ready")
	require.Eventually(t, func() bool {
		l, err := core.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == 1
	}, 10*time.Second, 20*time.Millisecond, "the node's ResourceSlice with alpha's device")
}
