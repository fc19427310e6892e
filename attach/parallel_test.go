package attach_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
)

// addStarts are when each ADD of the record began (the recorder notes the
// call before it sleeps), earliest first.
func addStarts(kf *attachtest.Fixture) []time.Time {
	kf.T.Helper()
	var out []time.Time
	for _, c := range kf.Calls() {
		if c.Cmd != "ADD" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, c.Time)
		require.NoError(kf.T, err)
		out = append(out, at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

func TestParallelAttach(t *testing.T) {
	// Each ADD sleeps 2 s after it is recorded. In parallel every ADD starts
	// before the first one ends; one after the other, each starts after the
	// previous one ended. (An ordering, not a speed: 2 s leaves room for any
	// machine load.)
	const sleep = 2 * time.Second
	for _, parallel := range []bool{true, false} {
		t.Run(map[bool]string{true: "parallel", false: "serial"}[parallel], func(t *testing.T) {
			kf := attachtest.NewKube(t, func(c *config.Config) {
				c.ParallelAttach = parallel
				c.CNITimeout = config.Duration(2 * sleep)
			})
			for _, n := range []string{"a", "b", "c"} {
				kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-" + n}, "cni-"+n, map[string]any{"sleep": sleep.String()})
			}
			rec, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", "net-a, net-b, net-c"))
			require.NoError(t, err)
			starts := addStarts(kf)
			require.Len(t, starts, 3)
			spread := starts[2].Sub(starts[0])
			if parallel {
				assert.Less(t, spread, sleep, "all ADDs started before the first ended")
			} else {
				assert.GreaterOrEqual(t, spread, 2*sleep, "each ADD after the previous one")
			}
			// The record is exact either way: plan order, interfaces, results.
			require.Len(t, rec.Networks, 3)
			for i, want := range []string{"net1", "net2", "net3"} {
				assert.Equal(t, want, rec.Networks[i].IfName)
				assert.Equal(t, "ns1/net-"+string(rune('a'+i)), rec.Networks[i].NAD)
			}
			require.NoError(t, kf.Mgr.Detach(context.Background(), attachtest.NPWGPod("sb1", ""), true))
			dels := 0
			for _, c := range kf.Cmds() {
				if c[:3] == "DEL" {
					dels++
				}
			}
			assert.Equal(t, 3, dels)
		})
	}
}

func TestParallelAttachFailureRollsBackAllOnce(t *testing.T) {
	kf := attachtest.NewKube(t, func(c *config.Config) { c.ParallelAttach = true })
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "broken"}, "cni-broken", map[string]any{"failOn": "ADD", "failMsg": "no vlan 7"})
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-c"}, "cni-c", nil)
	_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", "net-a, broken, net-c"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no vlan 7")
	var adds, dels []string
	for _, c := range kf.Cmds() {
		switch c[:3] {
		case "ADD":
			adds = append(adds, c)
		case "DEL":
			dels = append(dels, c)
		}
	}
	sort.Strings(adds)
	sort.Strings(dels)
	assert.Equal(t, []string{"ADD cni-a net1", "ADD cni-broken net2", "ADD cni-c net3"}, adds, "all started together")
	assert.Equal(t, []string{"DEL cni-a net1", "DEL cni-broken net2", "DEL cni-c net3"}, dels, "each rolled back once")
	_, failures := kf.Sink.Snapshot()
	require.Len(t, failures, 1)
	assert.Equal(t, "ns1/broken", failures[0].Network)
}
