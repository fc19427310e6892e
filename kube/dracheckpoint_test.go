package kube

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/metrics"
)

// Issue 41, item 7: the kubelet's DRA checkpoint nri-cni cannot read is
// reported — nri_cni_dra_checkpoint_unreadable{reason} 1 for its reason,
// 0 for the others and for all once it is read; a Warning Event on the
// Node (as the kubelet refers to it) naming the file and the error, once
// per reason.
func TestDRACheckpointReported(t *testing.T) {
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	rec := record.NewFakeRecorder(10)
	rec.IncludeObject = true
	r, ok := NewDRAReporter("node-1", m, rec).(dra.CheckpointReporter)
	require.True(t, ok, "the driver's report hears of the checkpoint")
	gauge := func(reason string, v int) string {
		return fmt.Sprintf(`nri_cni_dra_checkpoint_unreadable{reason=%q} %d`, reason, v)
	}
	const path = "/proc/1/root/var/lib/kubelet/dra_manager_state"

	r.KubeletCheckpoint(path, "", nil)
	body := scrape(t, m)
	for _, reason := range dra.CheckpointReasons {
		assert.Contains(t, body, gauge(reason, 0))
	}
	assert.Empty(t, events(rec), "nothing to tell")

	version := fmt.Errorf("%s: %w: kind \"DRACheckpoint\" apiVersion \"checkpoint.dra.kubelet.k8s.io/v2\"", path, dra.ErrCheckpointVersion)
	r.KubeletCheckpoint(path, dra.CheckpointVersion, version)
	body = scrape(t, m)
	assert.Contains(t, body, gauge(dra.CheckpointVersion, 1))
	assert.Contains(t, body, gauge(dra.CheckpointMissing, 0))
	got := events(rec)
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "Warning DRACheckpointUnreadable nri-cni: cannot read the kubelet's DRA checkpoint "+path+
		" (version): "+version.Error()+". Until it can, a lost prepared-claim record of driver nri-cni.io is detected only for pods "+
		"nri-cni attached before")
	assert.Contains(t, got[0], "involvedObject{kind=Node,apiVersion=v1}")

	r.KubeletCheckpoint(path, "", nil)
	r.KubeletCheckpoint(path, dra.CheckpointVersion, version)
	assert.Empty(t, events(rec), "once per reason")
	missing := fmt.Errorf("the kubelet's DRA checkpoint: open %s: no such file or directory", path)
	r.KubeletCheckpoint(path, dra.CheckpointMissing, missing)
	body = scrape(t, m)
	assert.Contains(t, body, gauge(dra.CheckpointMissing, 1))
	assert.Contains(t, body, gauge(dra.CheckpointVersion, 0))
	assert.Len(t, events(rec), 1, "another reason is told")

	ref := nodeRef("node-1")
	assert.Equal(t, "node-1", string(ref.UID), "the kubelet's Node reference: kubectl describe node shows it")
	assert.Empty(t, ref.Namespace)
}
