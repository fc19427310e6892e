package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadfake "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned/fake"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/plan"
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

// testPolicy allows what conflistA and singleB use, in every namespace
// but "strict" (the code default's rule, which refuses them).
func testPolicy(t *testing.T) *nadpolicy.Policy {
	t.Helper()
	p, err := nadpolicy.New(&config.NADPolicy{
		Default:    &config.NADRule{Types: []string{"bridge", "tuning", "macvlan", "host-local"}, Bridges: []string{"br-?", "nad-a"}, Masters: []string{"eth1"}, IPAMRanges: []string{"10.251.0.0/16"}},
		Namespaces: map[string]config.NADRule{"strict": config.DefaultNADRule()},
	})
	require.NoError(t, err)
	return p
}

func runSource(t *testing.T, client nadFake) *NADSource {
	t.Helper()
	return runSourceWith(t, client, testPolicy(t), 0)
}

func runSourceWith(t *testing.T, client nadFake, p *nadpolicy.Policy, maxBytes int) *NADSource {
	t.Helper()
	return runSourceOpts(t, client, NADSourceOptions{Policy: p, MaxConfigBytes: maxBytes})
}

func runSourceOpts(t *testing.T, client nadFake, o NADSourceOptions) *NADSource {
	t.Helper()
	src := NewNADSource(client, o)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go src.Run(ctx)
	wctx, wcancel := context.WithTimeout(ctx, waitFor)
	defer wcancel()
	require.NoError(t, src.WaitForSync(wctx))
	return src
}

func TestNADSourceNotSyncedIsItsOwnError(t *testing.T) {
	src := NewNADSource(newNADFake(t, nad("ns1", "a", conflistA)), NADSourceOptions{})
	_, err := src.Network(plan.NADRef{Namespace: "ns1", Name: "a"})
	assert.ErrorIs(t, err, plan.ErrSourceNotSynced)
	assert.NotErrorIs(t, err, plan.ErrNoSuchNAD)
	assert.Contains(t, err.Error(), "not synced")
}

func TestNADSourceResolvesFromTheCache(t *testing.T) {
	client := newNADFake(t, nad("ns1", "a", conflistA), nad("ns1", "b", singleB), nad("ns2", "local", ""),
		nad("ns1", "broken", `{"cniVersion":"1.0.0","name":"x"}`), nad("ns1", "garbage", `not json`))
	src := runSource(t, client)
	before := len(client.Actions())

	n, err := src.Network(plan.NADRef{Namespace: "ns1", Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, "net-a", n.Name, "the CNI name comes from spec.config")
	require.Len(t, n.List.Plugins, 2)
	assert.True(t, n.Declares("mac"))
	assert.False(t, n.Declares("ips"))

	n, err = src.Network(plan.NADRef{Namespace: "ns1", Name: "b"})
	require.NoError(t, err)
	assert.Equal(t, "net-b", n.Name, "a single-plugin config becomes a one-plugin list")
	require.Len(t, n.List.Plugins, 1)

	n, err = src.Network(plan.NADRef{Namespace: "ns2", Name: "local"})
	require.NoError(t, err)
	assert.Equal(t, "local", n.Name)
	assert.Nil(t, n.List, "empty spec.config: the confDir network of the object's name")

	_, err = src.Network(plan.NADRef{Namespace: "ns2", Name: "a"})
	assert.ErrorIs(t, err, plan.ErrNoSuchNAD)
	assert.Contains(t, err.Error(), "ns2/a")

	for _, name := range []string{"broken", "garbage"} {
		_, err = src.Network(plan.NADRef{Namespace: "ns1", Name: name})
		assert.ErrorIs(t, err, plan.ErrBadNAD)
		assert.Contains(t, err.Error(), "ns1/"+name+": spec.config")
	}
	assert.Len(t, client.Actions(), before, "lookups never call the API")
}

func TestNADSourceFollowsUpdatesAndDeletes(t *testing.T) {
	client := newNADFake(t, nad("ns1", "a", conflistA))
	src := runSource(t, client)
	ref := plan.NADRef{Namespace: "ns1", Name: "a"}
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
		return err != nil && assert.ErrorIs(t, err, plan.ErrNoSuchNAD)
	}, waitFor, 10*time.Millisecond)
}

// A NAD the policy of its namespace refuses, or one over the size limit,
// fails with an error naming the NAD, the offending key and the policy key.
func TestNADSourceEnforcesThePolicy(t *testing.T) {
	hostDevice := `{"cniVersion":"1.0.0","name":"hd","type":"host-device","device":"eth0"}`
	client := newNADFake(t, nad("ns1", "hd", hostDevice), nad("ns1", "slashes", `{"cniVersion":"1.0.0","name":"../../etc/cron.d","type":"tuning"}`),
		nad("ns1", "big", `{"cniVersion":"1.0.0","name":"big","type":"tuning","pad":"`+strings.Repeat("x", 2000)+`"}`),
		nad("strict", "a", conflistA), nad("strict", "local", " \n"), nad("ns1", "a", conflistA))
	src := runSourceWith(t, client, testPolicy(t), 1024)

	for _, tc := range []struct {
		ns, name string
		want     []string
	}{
		{"ns1", "hd", []string{"ns1/hd", `spec.config.type: "host-device" is not an allowed plugin type`, "kubernetes.nadPolicy.default.types"}},
		{"ns1", "slashes", []string{"ns1/slashes", `spec.config.name: "../../etc/cron.d" is not a valid CNI network name`, "(kubernetes.nadPolicy)"}},
		{"ns1", "big", []string{"ns1/big", "spec.config: is 2060 bytes, more than 1024", "kubernetes.maxNADConfigBytes"}},
		{"strict", "a", []string{"strict/a", `spec.config.plugins[0].bridge: "br-a" is not an allowed bridge`, "kubernetes.nadPolicy.namespaces.strict.bridges"}},
	} {
		t.Run(tc.ns+"/"+tc.name, func(t *testing.T) {
			_, err := src.Network(plan.NADRef{Namespace: tc.ns, Name: tc.name})
			require.Error(t, err)
			assert.ErrorIs(t, err, plan.ErrBadNAD)
			assert.ErrorIs(t, err, nadpolicy.ErrRefused)
			var v *nadpolicy.Violation
			assert.ErrorAs(t, err, &v)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	n, err := src.Network(plan.NADRef{Namespace: "ns1", Name: "a"})
	require.NoError(t, err, "the same config is allowed where the rule allows it")
	assert.Equal(t, "net-a", n.Name)
	n, err = src.Network(plan.NADRef{Namespace: "strict", Name: "local"})
	require.NoError(t, err, "an empty spec.config is the admin's confDir network: never judged")
	assert.Nil(t, n.List)
}

// The verdict is memoised per resourceVersion: fixing the NAD fixes it.
func TestNADSourceVerdictFollowsUpdates(t *testing.T) {
	client := newNADFake(t, nad("ns1", "a", `{"cniVersion":"1.0.0","name":"a","type":"bridge","bridge":"cni0"}`))
	src := runSource(t, client)
	ref := plan.NADRef{Namespace: "ns1", Name: "a"}
	_, err := src.Network(ref)
	require.ErrorIs(t, err, nadpolicy.ErrRefused)
	_, again := src.Network(ref)
	assert.Same(t, err, again, "memoised")

	fixed := nad("ns1", "a", conflistA)
	fixed.ResourceVersion = "2"
	_, err = client.K8sCniCncfIoV1().NetworkAttachmentDefinitions("ns1").Update(context.Background(), fixed, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := src.Network(ref)
		return err == nil && n.Name == "net-a"
	}, waitFor, 10*time.Millisecond)
}

// The verdict memo holds one entry per NAD that exists, however many there
// are (issue 28: it was dropped whole past 4,096 entries, so a larger
// cluster parsed every NAD again on every refresh), and a deleted NAD's
// entry goes with it.
func TestNADSourceMemoIsPerNAD(t *testing.T) {
	const n = 4100 // past the old bound
	objs := make([]*nadv1.NetworkAttachmentDefinition, n)
	for i := range objs {
		objs[i] = nad(fmt.Sprintf("ns%d", i%7), fmt.Sprintf("n%d", i), conflistA)
	}
	client := newNADFake(t, objs...)
	src := runSourceOpts(t, client, NADSourceOptions{Policy: testPolicy(t), MaxCacheBytes: 1 << 30})
	require.Len(t, src.List(), n)
	assert.Equal(t, n, src.memoSize(), "every NAD's verdict kept")
	first, err := src.Network(plan.NADRef{Namespace: "ns0", Name: "n0"})
	require.NoError(t, err)
	again, err := src.Network(plan.NADRef{Namespace: "ns0", Name: "n0"})
	require.NoError(t, err)
	assert.Same(t, first, again, "served from the memo, not parsed again")

	require.NoError(t, client.K8sCniCncfIoV1().NetworkAttachmentDefinitions("ns0").Delete(context.Background(), "n0", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return src.memoSize() == n-1 }, waitFor, 10*time.Millisecond,
		"the deleted NAD's entry goes")
}
