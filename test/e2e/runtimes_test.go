package e2e

import (
	"testing"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// Runtimes. Scenarios whose behaviour is the runtime's run once per shared
// runtime, as subtests named after it: "containerd", "crio-infra-kept" (NRI
// gets the pause pid) and "crio-infra-dropped" (drop_infra_ctr, the kubelet's
// setup: NRI gets Pid 0). They differ where the test says so:
//
//	                         containerd 2.4.2          CRI-O 1.36.3
//	netns at NRI Stop        still pinned: DEL in it   gone: empty-netns DEL
//	Stop errors              logged                    returned to the kubelet
//	after a runtime restart  no Stop/Remove for old    Stop/Remove arrive
//	                         pods (the watcher frees)
//	host-network pod         no netns in the request   a pinned bind of the host's
//	NRI Pid                  pause pid                 pause pid, or 0 (infra dropped)

// forRuntimes runs fn as a subtest per shared runtime.
func forRuntimes(t *testing.T, fn func(t *testing.T, rt harness.Runtime)) {
	testenv.RequireRoot(t)
	for _, rt := range world.runtimes {
		t.Run(runtimeName(rt), func(t *testing.T) { fn(t, rt) })
	}
}

// runtimeName names rt in subtests and messages.
func runtimeName(rt harness.Runtime) string {
	c, ok := rt.(*harness.CRIO)
	switch {
	case !ok:
		return rt.Name()
	case c.DropInfra:
		return "crio-infra-dropped"
	default:
		return "crio-infra-kept"
	}
}

// isCRIO: CRI-O's event order and rules apply.
func isCRIO(rt harness.Runtime) bool {
	_, ok := rt.(*harness.CRIO)
	return ok
}

// dropsInfra: CRI-O runs no infra process, NRI gets Pid 0.
func dropsInfra(rt harness.Runtime) bool {
	c, ok := rt.(*harness.CRIO)
	return ok && c.DropInfra
}

// primarySubnet is the subnet of the runtime's own network (eth0).
func primarySubnet(rt harness.Runtime) string {
	switch r := rt.(type) {
	case *harness.Containerd:
		return r.PrimarySubnet
	case *harness.CRIO:
		return r.PrimarySubnet
	}
	return ""
}
