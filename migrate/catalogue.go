package migrate

import (
	"fmt"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/plan"
)

// catalogue is plan.NADSource over the listed NADs, each judged as the
// node's informer cache judges it (plan.ParseNADConfig), once. Not safe for
// concurrent use: a check plans one pod at a time.
type catalogue struct {
	nads     map[plan.NADRef]NAD
	policy   *nadpolicy.Policy
	maxBytes int
	judged   map[plan.NADRef]judged
}

type judged struct {
	net *cni.Network
	err error
}

func newCatalogue(nads []NAD, policy *nadpolicy.Policy, maxBytes int) *catalogue {
	c := &catalogue{nads: make(map[plan.NADRef]NAD, len(nads)), policy: policy, maxBytes: maxBytes,
		judged: map[plan.NADRef]judged{}}
	for _, n := range nads {
		c.nads[plan.NADRef{Namespace: n.Namespace, Name: n.Name}] = n
	}
	return c
}

// Network implements plan.NADSource, with the errors of the node's cache.
func (c *catalogue) Network(ref plan.NADRef) (*cni.Network, error) {
	nad, ok := c.nads[ref]
	if !ok {
		return nil, fmt.Errorf("%w %s", plan.ErrNoSuchNAD, ref)
	}
	if j, ok := c.judged[ref]; ok {
		return j.net, j.err
	}
	n, err := plan.ParseNADConfig(ref, nad.Config, c.policy, c.maxBytes)
	if err == nil { // as the node's NAD cache reads it (kube.NADSource)
		n, err = plan.WithResourceName(ref, n, nad.ResourceName)
	}
	c.judged[ref] = judged{net: n, err: err}
	return n, err
}
