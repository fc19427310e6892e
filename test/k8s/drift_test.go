package k8s

import (
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/test/harness"
)

// TestDriftCheck: someone deletes net1 inside a running pod; nri-cni's
// periodic CNI CHECK (checkInterval, 3 s in the overlay) notices and raises
// a Warning Event on the pod naming the network, and repairs nothing; the
// pod's deletion still releases the address.
func TestDriftCheck(t *testing.T) {
	f := newFixture(t)
	n := f.newNAD("default", harness.RandomName("nad-drift-"))
	pod := f.create(f.pod(harness.RandomName("drift-"), "default", map[string]string{npwgAnnotation: n.Name}))
	p := f.waitReady("default", pod.Name)
	id, st := f.readySandbox(p)
	f.iface(p, "net1")

	require.NoError(t, ns.WithNetNSPath(st.NetnsPath, func(ns.NetNS) error {
		l, err := netlink.LinkByName("net1")
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	}))
	msg := f.waitEvent("default", pod.Name, "NetworkCheckFailed", "default/"+n.Name, "failed CNI CHECK", "not repaired")
	t.Logf("drift: %s", msg)
	_, ok, err := harness.PodIface(st.NetnsPath, "net1")
	require.NoError(t, err)
	assert.False(t, ok, "not re-added behind the pod's back")

	f.deletePod("default", pod.Name)
	f.waitReleased(id)
	assert.Empty(t, n.ipFiles(id), "the address released all the same")
}
