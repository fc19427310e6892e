package kube

import (
	"context"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadfake "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned/fake"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/hook"
)

// waitFor is generous: the machine is loaded.
const waitFor = 30 * time.Second

// nadFake is the NPWG fake clientset, telling the reflector it does not
// speak the watch-list protocol (the generated v1.7.7 fake predates it).
type nadFake struct{ *nadfake.Clientset }

func (nadFake) IsWatchListSemanticsUnSupported() bool { return true }

// newNADFake creates the objects through the client: the generated fake's
// constructor files them under a resource name its own List does not use
// ("networkattachmentdefinitions" vs "network-attachment-definitions").
func newNADFake(t *testing.T, objs ...*nadv1.NetworkAttachmentDefinition) nadFake {
	t.Helper()
	c := nadFake{nadfake.NewSimpleClientset()}
	for _, o := range objs {
		_, err := c.K8sCniCncfIoV1().NetworkAttachmentDefinitions(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return c
}

func nad(ns, name, config string) *nadv1.NetworkAttachmentDefinition {
	return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}
}

const (
	conflistA = `{"cniVersion":"1.0.0","name":"net-a","plugins":[{"type":"bridge","bridge":"br-a","capabilities":{"mac":true}},{"type":"tuning"}]}`
	singleB   = `{"cniVersion":"1.0.0","name":"net-b","type":"macvlan","master":"eth1"}`
)

func runSource(t *testing.T, client nadFake) *NADSource {
	t.Helper()
	src := NewNADSource(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go src.Run(ctx)
	wctx, wcancel := context.WithTimeout(ctx, waitFor)
	defer wcancel()
	require.NoError(t, src.WaitForSync(wctx))
	return src
}

func TestNADSourceNotSyncedIsItsOwnError(t *testing.T) {
	src := NewNADSource(newNADFake(t, nad("ns1", "a", conflistA)), 0)
	_, err := src.Network(hook.NADRef{Namespace: "ns1", Name: "a"})
	assert.ErrorIs(t, err, hook.ErrSourceNotSynced)
	assert.NotErrorIs(t, err, hook.ErrNoSuchNAD)
	assert.Contains(t, err.Error(), "not synced")
}

func TestNADSourceResolvesFromTheCache(t *testing.T) {
	client := newNADFake(t, nad("ns1", "a", conflistA), nad("ns1", "b", singleB), nad("ns2", "local", ""),
		nad("ns1", "broken", `{"cniVersion":"1.0.0","name":"x"}`), nad("ns1", "garbage", `not json`))
	src := runSource(t, client)
	before := len(client.Actions())

	n, err := src.Network(hook.NADRef{Namespace: "ns1", Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, "net-a", n.Name, "the CNI name comes from spec.config")
	require.Len(t, n.List.Plugins, 2)
	assert.True(t, n.Declares("mac"))
	assert.False(t, n.Declares("ips"))

	n, err = src.Network(hook.NADRef{Namespace: "ns1", Name: "b"})
	require.NoError(t, err)
	assert.Equal(t, "net-b", n.Name, "a single-plugin config becomes a one-plugin list")
	require.Len(t, n.List.Plugins, 1)

	n, err = src.Network(hook.NADRef{Namespace: "ns2", Name: "local"})
	require.NoError(t, err)
	assert.Equal(t, "local", n.Name)
	assert.Nil(t, n.List, "empty spec.config: the confDir network of the object's name")

	_, err = src.Network(hook.NADRef{Namespace: "ns2", Name: "a"})
	assert.ErrorIs(t, err, hook.ErrNoSuchNAD)
	assert.Contains(t, err.Error(), "ns2/a")

	for _, name := range []string{"broken", "garbage"} {
		_, err = src.Network(hook.NADRef{Namespace: "ns1", Name: name})
		assert.ErrorIs(t, err, hook.ErrBadNAD)
		assert.Contains(t, err.Error(), "ns1/"+name+": spec.config")
	}
	assert.Len(t, client.Actions(), before, "lookups never call the API")
}

func TestNADSourceFollowsUpdatesAndDeletes(t *testing.T) {
	client := newNADFake(t, nad("ns1", "a", conflistA))
	src := runSource(t, client)
	ref := hook.NADRef{Namespace: "ns1", Name: "a"}
	first, err := src.Network(ref)
	require.NoError(t, err)

	ctx := context.Background()
	updated := nad("ns1", "a", singleB)
	updated.ResourceVersion = "2"
	_, err = client.K8sCniCncfIoV1().NetworkAttachmentDefinitions("ns1").Update(ctx, updated, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := src.Network(ref)
		return err == nil && n.Name == "net-b"
	}, waitFor, 10*time.Millisecond)
	assert.Equal(t, "net-a", first.Name, "a network handed out earlier is not changed")

	require.NoError(t, client.K8sCniCncfIoV1().NetworkAttachmentDefinitions("ns1").Delete(ctx, "a", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := src.Network(ref)
		return err != nil && assert.ErrorIs(t, err, hook.ErrNoSuchNAD)
	}, waitFor, 10*time.Millisecond)
}
