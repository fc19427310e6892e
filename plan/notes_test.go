package plan

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// TestPlanNotesWhatItIgnored: the plan attaches the networks and returns,
// per attachment, what it ignored: the IPAM claim as a warning (the pod is
// told), extension keys as plain notes (logged); with claims beside the
// annotation too.
func TestPlanNotesWhatItIgnored(t *testing.T) {
	cfg := config.Default()
	cfg.PodSelection, cfg.RequireAnnotation = true, true
	cfg.Kubernetes = &config.KubernetesConfig{NPWGAnnotation: true}
	cat := Catalogue{Local: func() []*cni.Network { return []*cni.Network{network(t, "alpha")} },
		NADs: nads{{"team", "red"}: network(t, "cni-red"), {"team", "blue"}: network(t, "cni-blue")}}
	ann := map[string]string{AnnotationNPWGNetworks: `[{"name":"red"},
		{"name":"blue","ipam-claim-reference":"vm1.blue","org.example.tier":"gold"}]`}
	for _, claims := range [][]state.ClaimDevice{nil, {device("c1", "net", "alpha")}} {
		p, err := New(cfg, cat).Plan(context.Background(), Pod{Namespace: "team", Annotations: ann, Claims: claims})
		require.NoError(t, err)
		require.Len(t, p.Attachments, 2+len(claims))
		assert.Empty(t, p.Attachments[1].Caps, "the claim is passed to no plugin")
		require.Len(t, p.Notes, 2)
		ipam, ext := p.Notes[0], p.Notes[1]
		assert.Equal(t, Note{Network: "team/blue", IfName: "net2", Key: KeyIPAMClaimReference, Warning: true, Message: ipam.Message}, ipam)
		assert.Contains(t, ipam.Message, `k8s.v1.cni.cncf.io/networks element 2 (team/blue): the IPAM claim "vm1.blue" ("ipam-claim-reference") was not used`)
		assert.Contains(t, ipam.Message, "net2's addresses come from the network's own IPAM")
		assert.Equal(t, Note{Network: "team/blue", IfName: "net2", Key: "org.example.tier", Message: ext.Message}, ext)
		assert.Contains(t, ext.Message, `element 2 (team/blue): key "org.example.tier" ignored`)
	}
}
