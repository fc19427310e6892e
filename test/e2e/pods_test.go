package e2e

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
)

func TestPodGetsNet1WithKubeletArgs(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		s := newSuite(t, rt, suiteOpts{})
		id, err := s.run(harness.PodSpec{Name: "web", Namespace: "shop", UID: "uid-123"})
		require.NoError(t, err)
		st, err := s.cri.PodStatus(s.ctx, id)
		require.NoError(t, err)
		if dropsInfra(rt) {
			assert.Zero(t, st.Pid, "infra dropped: no pause process (NRI Pid 0)")
		} else {
			assert.Positive(t, st.Pid, "the pause process")
		}

		_, secondary, _ := net.ParseCIDR(s.net.Subnet)
		a := s.net1(st.NetnsPath)
		require.NotNil(t, a, "net1 exists in the pod")
		assert.True(t, secondary.Contains(a.IP), "%s in %s", a.IP, s.net.Subnet)
		_, primary, _ := net.ParseCIDR(primarySubnet(rt))
		assert.True(t, primary.Contains(net.ParseIP(st.IP)), "eth0 (%s) is the runtime's", st.IP)

		calls := s.calls()
		require.Len(t, calls, 1)
		c := calls[0]
		assert.Equal(t, "ADD", c.Cmd)
		assert.Equal(t, id, c.ContainerID)
		assert.Equal(t, "net1", c.IfName)
		assert.Equal(t, st.NetnsPath, c.Netns, "the pod's (pinned) netns")
		for _, kv := range []string{"IgnoreUnknown=1", "K8S_POD_NAME=web", "K8S_POD_NAMESPACE=shop",
			"K8S_POD_UID=uid-123", "K8S_POD_INFRA_CONTAINER_ID=" + id} {
			assert.Contains(t, strings.Split(c.Args, ";"), kv)
		}
	})
}

func TestTwoPodsReachEachOtherOverNet1(t *testing.T) {
	s := newSuite(t, world.ctd, suiteOpts{})
	_, a := s.mustRun("pod-a")
	_, b := s.mustRun("pod-b")
	ipB := s.net1(b.NetnsPath)
	require.NotNil(t, ipB)
	require.NotNil(t, s.net1(a.NetnsPath))
	require.NoError(t, harness.Ping(a.NetnsPath, ipB.IP))
}

// Stop releases the address: containerd sends Stop while the pinned netns
// exists (DEL in it); CRI-O has removed the namespaces before Stop (DEL with
// an empty netns from libcni's cache). Either way no veth is left, Stop again
// and Remove are no-ops, and the log says what happened, no more.
func TestStopReleasesThenRemoveIsClean(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		s := newSuite(t, rt, suiteOpts{})
		id, st := s.mustRun("stopper")
		require.NotNil(t, s.net1(st.NetnsPath))
		require.Len(t, s.net.IPFilesOf(id), 1)

		require.NoError(t, s.cri.StopPod(s.ctx, id))
		assert.Empty(t, s.net.IPFilesOf(id), "IP released at Stop")
		dels := s.callsOf("DEL", id)
		require.Len(t, dels, 1)
		if isCRIO(rt) {
			assert.Empty(t, dels[0].Netns, "CRI-O removed the netns before Stop: the empty-netns DEL")
		} else {
			// Stop holds the namespace open and DELs under the held path
			// (/proc/<nri-cni>/fd/N): the same namespace as the ADD's.
			adds := s.callsOf("ADD", id)
			require.Len(t, adds, 1)
			assert.NotEmpty(t, dels[0].Netns, "DEL ran in the netns, not the empty-netns fallback")
			assert.NotZero(t, dels[0].NetnsIno)
			assert.Equal(t, adds[0].NetnsIno, dels[0].NetnsIno, "DEL ran in the pod's namespace (%s)", dels[0].Netns)
		}

		require.NoError(t, s.cri.StopPod(s.ctx, id), "Stop again")
		require.NoError(t, s.cri.RemovePod(s.ctx, id))
		s.assertNoLeaks()
		assert.Equal(t, 1, s.count("DEL", id), "Stop again and Remove found nothing left to do")
		assert.Contains(t, s.cfg.Log(), "network detached")
		s.assertAccurateLog(id)
	})
}

// Host-network pods with failurePolicy fail: containerd passes no netns,
// CRI-O a pinned bind of the host's. Either way: no CNI call, the pod
// starts, nothing logged as an error.
func TestHostNetworkPodIsLeftAlone(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		s := newSuite(t, rt, suiteOpts{edit: func(_ string, c *harness.PluginConfig) { c.FailurePolicy = "fail" }})
		id, err := s.run(harness.PodSpec{Name: "hostnet", HostNetwork: true})
		require.NoError(t, err, "a host-network pod starts")
		pods, err := s.cri.ListPods(s.ctx, owner(t))
		require.NoError(t, err)
		require.Len(t, pods, 1)
		assert.Equal(t, "SANDBOX_READY", pods[0].State.String())
		require.NoError(t, s.cri.StopPod(s.ctx, id))
		require.NoError(t, s.cri.RemovePod(s.ctx, id))
		assert.Empty(t, s.calls(), "no CNI call for a host-network pod")
		s.assertNoLeaks()
		s.assertAccurateLog(id)
		if isCRIO(rt) {
			assert.Contains(t, s.cfg.Log(), "host-network sandbox: skipped", "CRI-O's pinned host bind is recognised")
		}
	})
}

func TestFailingChainFailsThePodCleanly(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		s := newSuite(t, rt, suiteOpts{recorder: map[string]any{"failOn": "ADD", "failMsg": "vlan 42 exhausted"}})
		_, err := s.run(harness.PodSpec{Name: "doomed"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), s.net.Name, "names the network")
		assert.Contains(t, err.Error(), "vlan 42 exhausted", "carries the plugin's message")
		s.assertNoLeaks()
	})
}

func TestManyPodsConcurrentlyLeaveNothing(t *testing.T) {
	s := newSuite(t, world.ctd, suiteOpts{})
	const pods, workers = 20, 4
	_, subnet, _ := net.ParseCIDR(s.net.Subnet)
	work := make(chan int)
	errs := make(chan error, pods)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs <- s.cycle(fmt.Sprintf("many-%02d", i), subnet)
			}
		}()
	}
	for i := 0; i < pods; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	s.assertNoLeaks()
	adds, dels := 0, 0
	for _, c := range s.calls() {
		switch c.Cmd {
		case "ADD":
			adds++
		case "DEL":
			dels++
		}
	}
	assert.Equal(t, pods, adds)
	assert.Equal(t, pods, dels, "one DEL per pod (Stop); Remove found nothing left to do")
}

// cycle runs, checks, stops and removes one pod.
func (s *suite) cycle(name string, subnet *net.IPNet) error {
	id, err := s.run(harness.PodSpec{Name: name})
	if err != nil {
		return fmt.Errorf("%s: run: %w", name, err)
	}
	st, err := s.cri.PodStatus(s.ctx, id)
	if err != nil {
		return fmt.Errorf("%s: status: %w", name, err)
	}
	itf, ok, err := harness.PodIface(st.NetnsPath, "net1")
	if err != nil || !ok || len(itf.Addrs) != 1 || !subnet.Contains(itf.Addrs[0].IP) {
		return fmt.Errorf("%s: net1 = %+v (present %t, err %v), want one address in %s", name, itf, ok, err, subnet)
	}
	if err := s.cri.StopPod(s.ctx, id); err != nil {
		return fmt.Errorf("%s: stop: %w", name, err)
	}
	if err := s.cri.RemovePod(s.ctx, id); err != nil {
		return fmt.Errorf("%s: remove: %w", name, err)
	}
	return nil
}
