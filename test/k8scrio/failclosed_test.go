package k8scrio

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// TestCRIOFailClosedWhileAway: on a CRI-O node set up by deploy/node (NRI's
// default validator), nri-cni's pod gone while annotated pods are created:
// CRI-O refuses their containers ("required plugin"); when nri-cni is back
// they start with net1 — their command exits 1 at once without it, so a
// container that ran without it would show as a restart.
func TestCRIOFailClosedWhileAway(t *testing.T) {
	f := newFixture(t)
	w := f.w
	back, err := w.d.Away(f.ctx)
	restore := func() { require.NoError(t, back(f.ctx), "nri-cni back and serving") }
	t.Cleanup(restore)
	require.NoError(t, err)

	var names []string
	for range 6 {
		name := harness.RandomName("crio-away-")
		p := f.pod(name, map[string]string{k8sdeploy.Annotation: w.o.NetName})
		p.Spec.Containers[0].Command = []string{"/pause", "--require-iface", "net1"}
		f.create(p)
		names = append(names, name)
	}
	f.waitFor("CRI-O refusing the pods' containers", waitLong, func() (bool, string) {
		refused := 0
		for _, name := range names {
			p, err := f.k.CoreV1().Pods("default").Get(f.ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if st := cs.State.Waiting; st != nil && strings.Contains(st.Message, `required plugin "nri-cni" not present`) {
					refused++
				}
			}
		}
		return refused == len(names), fmt.Sprintf("%d of %d refused", refused, len(names))
	})
	back0 := time.Now()
	restore()
	for _, name := range names {
		p := f.waitReady(name)
		assert.Equal(t, `["nri-cni"]`, p.Annotations["required-plugins.noderesource.dev/pod"], name)
		for _, cs := range p.Status.ContainerStatuses {
			assert.Zero(t, cs.RestartCount, "%s: container %s ran without net1", name, cs.Name)
		}
		f.iface(p, "net1")
	}
	t.Logf("%d pods created while nri-cni was away: all Ready with net1 %s after it was sent back", len(names),
		time.Since(back0).Round(100*time.Millisecond))
	for _, name := range names {
		f.deletePod(name)
	}
	f.waitReleased(f.seenIDs()...)
}
