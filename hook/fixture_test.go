package hook

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// fakeNetns resolves every pid to /fake/netns/<pid> unless told otherwise;
// Check succeeds for the paths in live.
type fakeNetns struct {
	mu         sync.Mutex
	resolveErr error
	live       map[string]netns.ID
	deadPids   map[uint32]bool
	links      map[string][]string
}

func (f *fakeNetns) Resolve(pid uint32, pinned string) (netns.Netns, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resolveErr != nil {
		return netns.Netns{}, f.resolveErr
	}
	p := pinned
	if p == "" {
		p = fmt.Sprintf("/fake/netns/%d", pid)
	}
	id := netns.ID{Dev: 4, Ino: uint64(len(f.live) + 1)}
	if old, ok := f.live[p]; ok {
		id = old
	}
	f.live[p] = id
	return netns.Netns{Path: p, ID: id}, nil
}

// ResolveRunning: the pid must be > 0 and its (fake) netns the pinned one,
// which must be live; pids in dead are gone.
func (f *fakeNetns) ResolveRunning(pid uint32, pinned string) (netns.Netns, error) {
	f.mu.Lock()
	dead := f.deadPids[pid]
	f.mu.Unlock()
	if pid == 0 || dead {
		return netns.Netns{}, fmt.Errorf("pid %d: %w", pid, netns.ErrNoNetns)
	}
	return f.Check(pinned)
}

func (f *fakeNetns) Check(path string) (netns.Netns, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.live[path]
	if !ok {
		return netns.Netns{}, os.ErrNotExist
	}
	return netns.Netns{Path: path, ID: id}, nil
}

// Links: the interfaces a test put in the namespace at path.
func (f *fakeNetns) Links(path string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.links[path], nil
}

func (f *fakeNetns) kill(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, path)
}

// fixture is a Manager over the recording plugin, in temp dirs.
type fixture struct {
	t        testing.TB
	mgr      *Manager
	ns       *fakeNetns
	cfg      config.Config
	confDir  string
	record   string
	cacheDir string
}

// recorderNet is a network config of the recording plugin.
func recorderNet(name, record string, extra map[string]any) map[string]any {
	plugin := map[string]any{"type": "cni-recorder", "recordFile": record, "ip": "10.99.0.5/24"}
	for k, v := range extra {
		plugin[k] = v
	}
	return map[string]any{"cniVersion": "1.1.0", "name": name, "plugins": []any{plugin}}
}

// newFixture writes the given networks (name -> plugin extras) and attaches
// them in the order given.
func newFixture(t testing.TB, nets []string, extras map[string]map[string]any) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, ns: &fakeNetns{live: map[string]netns.ID{}, deadPids: map[uint32]bool{}}, confDir: filepath.Join(root, "net.d"),
		record: filepath.Join(root, "calls.jsonl"), cacheDir: filepath.Join(root, "cache")}
	require.NoError(t, os.MkdirAll(f.confDir, 0o755))
	for i, n := range nets {
		testenv.WriteJSON(t, filepath.Join(f.confDir, fmt.Sprintf("%02d-%s.conflist", i, n)), recorderNet(n, f.record, extras[n]))
	}
	f.cfg = config.Default()
	f.cfg.ConfDir, f.cfg.BinDirs, f.cfg.CacheDir, f.cfg.StateDir = f.confDir, []string{recorderDir}, f.cacheDir, filepath.Join(root, "state")
	f.cfg.Networks = nets
	store, err := state.Open(f.cfg.StateDir)
	require.NoError(t, err)
	engine := cni.New(cni.Options{ConfDir: f.confDir, BinDirs: f.cfg.BinDirs, CacheDir: f.cacheDir})
	skipped, err := engine.Reload(context.Background())
	require.NoError(t, err)
	require.Empty(t, skipped)
	f.mgr = NewManager(f.cfg, engine, f.ns, store, nil)
	return f
}

func (f *fixture) calls() []testenv.Call { return testenv.ReadCalls(f.t, f.record) }

func (f *fixture) cmds() []string {
	var out []string
	for _, c := range f.calls() {
		out = append(out, c.Cmd+" "+c.Network+" "+c.IfName)
	}
	return out
}

// attachCmds is cmds without the GC calls a resync makes.
func (f *fixture) attachCmds() []string {
	var out []string
	for _, c := range f.cmds() {
		if !strings.HasPrefix(c, "GC ") {
			out = append(out, c)
		}
	}
	return out
}

func (f *fixture) cached(id string) int {
	atts, err := f.mgr.Engine().CachedAttachments(id)
	require.NoError(f.t, err)
	return len(atts)
}

func pod(id string, pid uint32) Sandbox {
	return Sandbox{ID: id, Kind: "pod", Pid: pid,
		Pod: cni.PodIdentity{Namespace: "ns1", Name: "pod-" + id, UID: "uid-" + id, InfraID: id}}
}
