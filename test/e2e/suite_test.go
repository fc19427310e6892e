package e2e

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// suite is one test's nri-cni attached to one of the shared runtimes: its own
// secondary network (bridge + host-local, then the recorder), config, state
// and cache, and the pods it created.
type suite struct {
	t       *testing.T
	ctx     context.Context
	rt      harness.Runtime
	cri     *harness.CRI
	net     harness.Secondary
	cfg     harness.PluginConfig
	plugin  *harness.Plugin
	record  string
	cfgPath string
	// pluginArgs are suiteOpts.pluginArgs, for restarts.
	pluginArgs []string

	mu   sync.Mutex
	pods []string
}

type suiteOpts struct {
	recorder map[string]any // extra keys for the recorder chained after bridge
	// edit may change the config and add networks to its confDir.
	edit func(dir string, cfg *harness.PluginConfig)
	// pluginArgs are added to `nri-cni run` (e.g. --metrics-addr).
	pluginArgs []string
}

// newSuite attaches a fresh nri-cni to rt (world.ctd or a world CRI-O).
func newSuite(t *testing.T, rt harness.Runtime, o suiteOpts) *suite {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	s := &suite{t: t, ctx: ctx, rt: rt, record: filepath.Join(dir, "calls.jsonl")}
	rec := map[string]any{"type": "cni-recorder", "recordFile": s.record}
	for k, v := range o.recorder {
		rec[k] = v
	}
	s.pluginArgs = o.pluginArgs
	var err error
	s.net, s.cfg, s.cfgPath = pluginSetup(t, dir, rec)
	if o.edit != nil {
		o.edit(dir, &s.cfg)
		require.NoError(t, s.cfg.Write(s.cfgPath))
	}

	s.cri = dialCRI(ctx, t, rt.CRIAddress())
	t.Cleanup(func() { s.cri.Close() })

	s.plugin, err = harness.StartPlugin(ctx, rt, world.bin, s.cfgPath, s.cfg, o.pluginArgs...)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Pods first (so nri-cni tears them down), then the plugin.
		cleanupPods(t, rt.CRIAddress())
		if s.plugin != nil {
			if err := s.plugin.Stop(); err != nil {
				t.Error(err)
			}
		}
		if t.Failed() {
			t.Logf("nri-cni log:\n%s", s.cfg.Log())
			t.Logf("%s log tail:\n%s", runtimeName(rt), rt.LogTail(40))
		}
	})
	return s
}

// run creates a pod and returns its id (registered for cleanup).
func (s *suite) run(spec harness.PodSpec) (string, error) {
	if spec.Namespace == "" {
		spec.Namespace = "e2e"
	}
	if spec.UID == "" {
		spec.UID = harness.RandomName("uid-")
	}
	// As the kubelet asks: a pid namespace per container. Without it CRI-O
	// keeps the infra container even with drop_infra_ctr.
	spec.PidPerContainer = spec.PidPerContainer || isCRIO(s.rt)
	id, err := s.cri.RunPod(s.ctx, spec)
	if id != "" {
		s.mu.Lock()
		s.pods = append(s.pods, id)
		s.mu.Unlock()
	}
	return id, err
}

func (s *suite) mustRun(name string) (string, *harness.PodStatus) {
	s.t.Helper()
	id, err := s.run(harness.PodSpec{Name: name})
	require.NoError(s.t, err)
	st, err := s.cri.PodStatus(s.ctx, id)
	require.NoError(s.t, err)
	return id, st
}

// net1 returns net1's IPv4 address in the pod (nil if net1 is absent).
func (s *suite) net1(nsPath string) *net.IPNet {
	s.t.Helper()
	itf, ok, err := harness.PodIface(nsPath, "net1")
	require.NoError(s.t, err)
	if !ok {
		return nil
	}
	require.Len(s.t, itf.Addrs, 1, "net1 addresses")
	return &itf.Addrs[0]
}

func (s *suite) calls() []testenv.Call { return testenv.ReadCalls(s.t, s.record) }

// own lists the sandboxes of this test's pods: those it got an id for and
// those its recorder saw an ADD for (failed pods included).
func (s *suite) own() []string {
	s.mu.Lock()
	ids := append([]string(nil), s.pods...)
	s.mu.Unlock()
	for _, c := range s.calls() {
		if c.Cmd == "ADD" {
			ids = append(ids, c.ContainerID)
		}
	}
	return ids
}

// assertNoLeaks: none of this test's pods holds an IP, a libcni cache entry
// or a record, and no veth is left on the test's own bridge.
func (s *suite) assertNoLeaks() {
	s.t.Helper()
	own := s.own()
	require.Empty(s.t, s.net.IPFilesOf(own...), "host-local IP files of this test's pods")
	// A veth whose peer was in a netns that is gone (empty-netns DEL) goes
	// when the kernel finishes destroying that netns, asynchronously.
	testenv.Eventually(s.t, 5*time.Second, "no veths on the secondary bridge", func() bool {
		ports, err := harness.BridgePorts(s.net.Bridge)
		return err == nil && ports == 0
	})
	require.Empty(s.t, s.cfg.CacheFilesOf(own...), "libcni cache entries of this test's pods")
	require.Empty(s.t, s.cfg.StateFilesOf(own...), "nri-cni records of this test's pods")
}

// killPlugin SIGKILLs nri-cni (no chance to clean up anything).
func (s *suite) killPlugin() {
	s.plugin.Kill()
	s.plugin = nil
}

// startPlugin starts nri-cni again with the same config and state.
func (s *suite) startPlugin() {
	s.t.Helper()
	p, err := harness.StartPlugin(s.ctx, s.rt, world.bin, s.cfgPath, s.cfg, s.pluginArgs...)
	require.NoError(s.t, err)
	s.plugin = p
}

// count counts the recorded calls of cmd for id ("" = any).
func (s *suite) count(cmd, id string) int {
	n := 0
	for _, c := range s.calls() {
		if c.Cmd == cmd && (id == "" || c.ContainerID == id) {
			n++
		}
	}
	return n
}

// callsOf returns the recorded calls of cmd for id.
func (s *suite) callsOf(cmd, id string) []testenv.Call {
	var out []testenv.Call
	for _, c := range s.calls() {
		if c.Cmd == cmd && c.ContainerID == id {
			out = append(out, c)
		}
	}
	return out
}

// assertAccurateLog: nri-cni logged no error, and the netns watcher did not
// claim to have released one of ids after its Stop had released it already.
func (s *suite) assertAccurateLog(ids ...string) {
	s.t.Helper()
	lines := strings.Split(s.cfg.Log(), "\n")
	for _, l := range lines {
		if strings.Contains(l, "level=error") {
			s.t.Errorf("nri-cni logged an error: %s", l)
		}
	}
	// Exactly one party tears a pod down and says so. Log order is not
	// event order (the watcher may win the pod's lock and log after Stop,
	// which waited for it), so count: one "network detached" per pod.
	for _, id := range ids {
		detached := 0
		for _, l := range lines {
			if strings.Contains(l, id) && strings.Contains(l, `msg="network detached"`) {
				detached++
			}
		}
		if detached > 1 {
			s.t.Errorf("%s: %d teardowns logged, want one:\n%s", id, detached, s.cfg.Log())
		}
	}
}
