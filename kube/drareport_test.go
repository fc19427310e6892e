package kube

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/metrics"
)

// events drains a fake recorder.
func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// scrape is what m's /metrics serves.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// A NAD that cannot be published is reported: the gauge by reason on every
// refresh, and a Warning Event on the NAD — once per object version and
// reason, only for what is the NAD owner's to fix, and at most a burst of
// Events per node, then one per eventEvery.
func TestDRAReportEventsAndMetric(t *testing.T) {
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	rec := record.NewFakeRecorder(100)
	versions := map[string]string{"team-a/long": "7"}
	r := newDRAReport("node-1", m, rec, func(ns, name string) (*corev1.ObjectReference, string, bool) {
		v, ok := versions[ns+"/"+name]
		if !ok {
			v = "1"
		}
		return &corev1.ObjectReference{Kind: "NetworkAttachmentDefinition", Namespace: ns, Name: name, UID: types.UID("uid-" + name)}, v, true
	})
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	skips := []dra.Skip{
		{Network: "team-a/long", Namespace: "team-a", Class: dra.SkipAPILimits, Reason: "cannot be a DRA device: too long"},
		{Network: "team-b/macvlan", Namespace: "team-b", Class: dra.SkipCannotAttach, Reason: "no eth9 here"},
		{Network: "team-c/refused", Namespace: "team-c", Class: dra.SkipRefused, Reason: "nadPolicy"},
		{Network: "secondary", Class: dra.SkipMaxDevices, Reason: "budget"},
	}
	r.Unpublished(skips)
	got := events(rec)
	require.Len(t, got, 1, "only the NAD owner's problem, and only on a NAD: %v", got)
	assert.Equal(t, "Warning DRADeviceNotPublished nri-cni (node node-1): not published as a device of DRA driver nri-cni.io, "+
		"so claims cannot get it here: cannot be a DRA device: too long", got[0])

	r.Unpublished(skips)
	assert.Empty(t, events(rec), "told once per version and reason")
	versions["team-a/long"] = "8"
	r.Unpublished(skips)
	assert.Len(t, events(rec), 1, "a new version is told again")

	// A thousand NADs over their namespace's share: a burst of Events,
	// then one per eventEvery.
	var flood []dra.Skip
	for i := range 1000 {
		n := "team-d/n" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)
		flood = append(flood, dra.Skip{Network: n, Namespace: "team-d", Class: dra.SkipNamespaceShare, Reason: "share"})
	}
	r.Unpublished(flood)
	first := len(events(rec))
	assert.LessOrEqual(t, first, eventBurst)
	now = now.Add(time.Minute)
	r.Unpublished(flood)
	assert.LessOrEqual(t, len(events(rec)), int(time.Minute/eventEvery)+1)

	// The gauge: every reason, the last refresh's counts.
	r.Unpublished(skips)
	body := scrape(t, m)
	for _, line := range []string{`nri_cni_dra_unpublished{reason="api-limits"} 1`, `nri_cni_dra_unpublished{reason="cannot-attach"} 1`,
		`nri_cni_dra_unpublished{reason="refused"} 1`, `nri_cni_dra_unpublished{reason="max-devices"} 1`,
		`nri_cni_dra_unpublished{reason="namespace-share"} 0`, `nri_cni_dra_unpublished{reason="duplicate"} 0`} {
		assert.Contains(t, body, line)
	}
}

// NADs of kubernetes.sharedNamespaces are candidates any namespace's claim
// may get (the device's shared attribute the claim policy lets through);
// an Event's reference names the NAD with its UID.
func TestDRACandidatesShared(t *testing.T) {
	long := strings.Repeat("n", 200)
	src := runSource(t, newNADFake(t, nad("infra", "uplink", conflistA), nad("team-a", "a", conflistA), nad("team-a", long, conflistA)))
	cands := draCandidates(nil, src, &config.DRAConfig{Enabled: true}, []string{"infra"})
	require.Len(t, cands, 3)
	shared := map[string]bool{}
	for _, c := range cands {
		require.NoError(t, c.Err, c.Network)
		shared[c.Network] = c.Shared
	}
	assert.Equal(t, map[string]bool{"infra/uplink": true, "team-a/a": false, "team-a/" + long: false}, shared)
	inv := dra.BuildInventory(cands, func(dra.Candidate) error { return nil }, dra.InventoryOptions{Multiple: true, MaxDevices: 10})
	assert.Len(t, inv.Devices, 3, "the 200-character NAD too")

	ref, _, ok := src.nadRef("team-a", long) // the fake sets no uid or resourceVersion
	require.True(t, ok)
	assert.Equal(t, "NetworkAttachmentDefinition", ref.Kind)
	assert.Equal(t, long, ref.Name)
	_, _, ok = src.nadRef("team-a", "gone")
	assert.False(t, ok)
}
