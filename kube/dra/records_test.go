package dra

import (
	"context"
	"encoding/json"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// recordSink is the driver's Sink: claims released, and the Warning Events
// of claims whose record is missing.
type recordSink struct {
	warnings []string
}

func (s *recordSink) ClaimReleased(string, string, string) {}

func (s *recordSink) ClaimRecordMissing(ns, name, uid, msg string) {
	s.warnings = append(s.warnings, ns+"/"+name+" "+uid+": "+msg)
}

// recordsDriver is a driver of node-1 with the network alpha, over claims,
// with tune applied to its config.
func recordsDriver(t *testing.T, claims *state.Claims, tune func(*config.Config)) (*Driver, *plan.Planner, *recordSink) {
	t.Helper()
	alpha := net(t, "alpha", `{"type":"bridge","capabilities":{"mac":true},"ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`)
	cfg := config.Default()
	cfg.PodCapabilities = []string{"mac"}
	cfg.Kubernetes = &config.KubernetesConfig{DRA: &config.DRAConfig{Enabled: true, Sharing: config.SharingMultiple}}
	if tune != nil {
		tune(&cfg)
	}
	planner := plan.New(cfg, plan.Catalogue{Local: func() []*cni.Network { return []*cni.Network{alpha} }, NADs: noNADs{}})
	sink := &recordSink{}
	d := New(Options{NodeName: "node-1", Config: cfg.Kubernetes.DRA, Claims: claims, Planner: planner, Sink: sink,
		Candidates: func() []Candidate { return []Candidate{{Network: "alpha", Net: alpha, Local: true}} },
		Limits:     cfg.Limits, Log: quietLog()})
	require.True(t, d.refresh())
	return d, planner, sink
}

func quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

// kubeletEntry is one claim of a kubelet checkpoint written by the tests;
// no devices: the kubelet has not finished preparing it.
type kubeletEntry struct {
	ClaimUID, ClaimName, Namespace string
	PodUIDs                        map[string]struct{}
	DriverState                    map[string]map[string][]map[string]any
}

func entryOf(c *resourceapi.ResourceClaim, prepared bool) kubeletEntry {
	pods := map[string]struct{}{}
	for _, r := range c.Status.ReservedFor {
		pods[string(r.UID)] = struct{}{}
	}
	var devs []map[string]any
	if prepared {
		for _, r := range c.Status.Allocation.Devices.Results {
			devs = append(devs, map[string]any{"PoolName": r.Pool, "DeviceName": r.Device, "ShareID": r.ShareID,
				"RequestNames": []string{r.Request}, "CDIDeviceIDs": nil})
		}
	}
	return kubeletEntry{ClaimUID: string(c.UID), ClaimName: c.Name, Namespace: c.Namespace, PodUIDs: pods,
		DriverState: map[string]map[string][]map[string]any{DriverName: {"Devices": devs}}}
}

// writeKubeletCheckpoint writes a checkpoint in the kubelet's format.
func writeKubeletCheckpoint(t *testing.T, path string, entries ...kubeletEntry) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"kind": checkpointKind, "apiVersion": checkpointAPIVersion,
		"ClaimInfoStateList": entries})
	require.NoError(t, err)
	file, err := json.Marshal(map[string]any{"Data": string(data), "Checksum": crc32.ChecksumIEEE(data)})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, file, 0o600))
}

// A record lost after the kubelet prepared the claim (an empty file after
// a power loss) fails the pod's networks closed, says why (an Event on the
// claim, once), and is rebuilt from the claim once it can be read.
func TestLostRecordFailsClosedThenIsRebuilt(t *testing.T) {
	stateDir, kubelet := t.TempDir(), filepath.Join(t.TempDir(), CheckpointFile)
	claims, err := state.OpenClaims(stateDir)
	require.NoError(t, err)
	d, _, _ := recordsDriver(t, claims, nil)
	dev := d.Published().Devices[0].Name
	c := claim("team", "net", map[string]string{"a": dev}, opaque(resourceapi.AllocationConfigSourceClaim, `"interface":"data0"`))
	_, err = d.prepare(c)
	require.NoError(t, err)
	pending := claim("team", "pending", map[string]string{"a": dev})
	writeKubeletCheckpoint(t, kubelet, entryOf(c, true), entryOf(pending, false))

	// nri-cni restarts with the record emptied.
	file := filepath.Join(stateDir, "claims", string(c.UID)+".json")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	claims, err = state.OpenClaims(stateDir)
	require.NoError(t, err)
	require.Len(t, claims.LoadErrors(), 1)
	CheckRecordsAtStart(claims, kubelet, quietLog())
	missing := claims.Missing()
	require.Len(t, missing, 1, "the claim still being prepared is not missing")
	assert.Equal(t, "team/net", missing[0].String())
	assert.Contains(t, missing[0].Reason, "unreadable")

	d, planner, sink := recordsDriver(t, claims, nil)
	_, err = planner.Plan(context.Background(), plan.Pod{Namespace: "team", Claims: claims.ForPod("pod-uid")})
	require.ErrorIs(t, err, plan.ErrClaimRecordMissing)
	assert.Contains(t, err.Error(), "ResourceClaim team/net (uid uid-net): no record of the prepared claim: its prepared-claim record is unreadable")

	// No API client, then the claim not found: not rebuilt, said once.
	k := newRecordKeeper(d, kubelet)
	k.pass(context.Background())
	client := fake.NewClientset()
	d.o.Client = client
	k.pass(context.Background())
	k.pass(context.Background())
	require.Len(t, sink.warnings, 2, "one Event per reason: %v", sink.warnings)
	assert.Contains(t, sink.warnings[1], "team/net uid-net: nri-cni has no record of preparing this claim on node node-1 "+
		"(its prepared-claim record is unreadable")
	assert.Contains(t, sink.warnings[1], `could not rebuild it (reading the claim: resourceclaims.resource.k8s.io "net" not found)`)
	_, err = planner.Plan(context.Background(), plan.Pod{Namespace: "team", Claims: claims.ForPod("pod-uid")})
	require.ErrorIs(t, err, plan.ErrClaimRecordMissing, "still failing closed")

	// The claim can be read: the record is rebuilt, the pod attaches.
	_, err = client.ResourceV1().ResourceClaims("team").Create(context.Background(), c, metav1.CreateOptions{})
	require.NoError(t, err)
	k.pass(context.Background())
	assert.Empty(t, claims.Missing())
	p, err := planner.Plan(context.Background(), plan.Pod{Namespace: "team", Claims: claims.ForPod("pod-uid")})
	require.NoError(t, err)
	last := p.Attachments[len(p.Attachments)-1]
	require.NotNil(t, last.Claim, "the claim's attachment")
	assert.Equal(t, "data0", last.IfName)
	reopened, err := state.OpenClaims(stateDir)
	require.NoError(t, err)
	assert.Empty(t, reopened.LoadErrors(), "the file is whole again")
	_, ok := reopened.Get(string(c.UID))
	assert.True(t, ok)
}

// A rebuild repeats every check of a prepare, and a claim of that name that
// is another claim, or reserved for a pod the kubelet does not hold it for,
// is not taken for the lost one.
func TestRebuildRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		tune func(*config.Config)
		edit func(*resourceapi.ResourceClaim)
		msg  string
	}{
		{name: "another claim of that name", edit: func(c *resourceapi.ResourceClaim) { c.UID = "uid-new" },
			msg: "the claim of that name now is another (uid uid-new)"},
		{name: "reserved for another pod", edit: func(c *resourceapi.ResourceClaim) {
			c.Status.ReservedFor[0].UID, c.OwnerReferences[0].UID = "pod-2", "pod-2"
		}, msg: "it is reserved for pod pod-2, which the kubelet does not hold it for"},
		{name: "its class not allowed any more", tune: func(c *config.Config) {
			c.Kubernetes.DRA.DeviceClasses = &config.DeviceClassRule{Default: []string{"team-net"}}
		}, msg: `DeviceClass "nri-cni.io" is not one namespace team may use`},
		{name: "its config invalid", edit: func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
				opaque(resourceapi.AllocationConfigSourceClaim, `"MAC":"02:00:00:00:00:01"`)}
		}, msg: `key "MAC" is not "mac"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kubelet := filepath.Join(t.TempDir(), CheckpointFile)
			claims, err := state.OpenClaims(t.TempDir())
			require.NoError(t, err)
			d, planner, sink := recordsDriver(t, claims, tc.tune)
			c := claim("team", "net", map[string]string{"a": d.Published().Devices[0].Name})
			c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "a", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: DriverName}}}
			writeKubeletCheckpoint(t, kubelet, entryOf(c, true))
			served := c.DeepCopy()
			if tc.edit != nil {
				tc.edit(served)
			}
			d.o.Client = fake.NewClientset(served)
			newRecordKeeper(d, kubelet).pass(context.Background())
			require.Len(t, sink.warnings, 1)
			assert.Contains(t, sink.warnings[0], tc.msg)
			_, err = planner.Plan(context.Background(), plan.Pod{Namespace: "team", Claims: claims.ForPod("pod-uid")})
			require.ErrorIs(t, err, plan.ErrClaimRecordMissing)
		})
	}
}

// Unprepared by the kubelet (no longer in its checkpoint), a missing claim
// is forgotten; a checkpoint nri-cni cannot read changes nothing.
func TestMissingClaimForgottenWhenUnprepared(t *testing.T) {
	kubelet := filepath.Join(t.TempDir(), CheckpointFile)
	claims, err := state.OpenClaims(t.TempDir())
	require.NoError(t, err)
	d, _, sink := recordsDriver(t, claims, nil)
	c := claim("team", "net", map[string]string{"a": d.Published().Devices[0].Name})
	writeKubeletCheckpoint(t, kubelet, entryOf(c, true))
	k := newRecordKeeper(d, kubelet)
	k.pass(context.Background())
	require.Len(t, claims.Missing(), 1)
	require.Len(t, sink.warnings, 1)

	require.NoError(t, os.WriteFile(kubelet, []byte("{"), 0o600))
	k.pass(context.Background())
	assert.Len(t, claims.Missing(), 1, "an unreadable checkpoint changes nothing")

	writeKubeletCheckpoint(t, kubelet)
	k.pass(context.Background())
	assert.Empty(t, claims.Missing())
	assert.Empty(t, claims.ForPod("pod-uid"))
	assert.Empty(t, k.warned)
}
