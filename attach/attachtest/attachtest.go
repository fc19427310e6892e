// Package attachtest builds attachment engines for tests: a Manager over the
// recording CNI plugin (test/fakes/cni-recorder) in temp dirs, a fake
// namespace resolver, and, for Kubernetes mode, a fake NAD source and status
// sink. Tests of attach, reconcile, hook/nri and hook/oci share it. Call
// Main from the package's TestMain.
package attachtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/deviceinfo"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// recorderDir holds the recording plugin, built once per test binary (Main).
var recorderDir string

// Main is a TestMain body: it builds the recording plugin, runs the tests
// and cleans up.
func Main(m *testing.M) int { return testenv.MainWithRecorder(m, &recorderDir, "") }

// RecorderDir is where Main built the recording plugin.
func RecorderDir() string { return recorderDir }

// Netns resolves every pid to /fake/netns/<pid> unless told otherwise;
// Check succeeds for the paths in Live. Lock Mu to change the fields while
// the engine runs.
type Netns struct {
	Mu         sync.Mutex
	ResolveErr error
	Live       map[string]netns.ID
	DeadPids   map[uint32]bool
	// LinksIn are the interfaces in the namespace at a path.
	LinksIn map[string][]string
	// Holds and Released count Hold and Release calls.
	Holds, Released int
}

// NewNetns returns an empty fake resolver.
func NewNetns() *Netns {
	return &Netns{Live: map[string]netns.ID{}, DeadPids: map[uint32]bool{}, LinksIn: map[string][]string{}}
}

// Resolve implements attach.NetnsResolver.
func (f *Netns) Resolve(pid uint32, pinned string) (netns.Netns, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.ResolveErr != nil {
		return netns.Netns{}, f.ResolveErr
	}
	p := pinned
	if p == "" {
		p = fmt.Sprintf("/fake/netns/%d", pid)
	}
	id := netns.ID{Dev: 4, Ino: uint64(len(f.Live) + 1)}
	if old, ok := f.Live[p]; ok {
		id = old
	}
	f.Live[p] = id
	return netns.Netns{Path: p, ID: id}, nil
}

// ResolveRunning: the pid must be > 0 and its (fake) netns the pinned one,
// which must be live; pids in DeadPids are gone.
func (f *Netns) ResolveRunning(pid uint32, pinned string) (netns.Netns, error) {
	f.Mu.Lock()
	dead := f.DeadPids[pid]
	f.Mu.Unlock()
	if pid == 0 || dead {
		return netns.Netns{}, fmt.Errorf("pid %d: %w", pid, netns.ErrNoNetns)
	}
	return f.Check(pinned)
}

// Check implements attach.NetnsResolver.
func (f *Netns) Check(path string) (netns.Netns, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	id, ok := f.Live[path]
	if !ok {
		return netns.Netns{}, os.ErrNotExist
	}
	return netns.Netns{Path: path, ID: id}, nil
}

// Links implements attach.NetnsResolver.
func (f *Netns) Links(path string) ([]string, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.LinksIn[path], nil
}

// Hold implements attach.NetnsResolver: the namespace at path, while live,
// is held under /fake/held<path> (live until Release, whatever Kill does).
func (f *Netns) Hold(path string, want netns.ID) (*netns.Held, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	id, ok := f.Live[path]
	if !ok {
		return nil, os.ErrNotExist
	}
	if want != (netns.ID{}) && id != want {
		return nil, netns.ErrMismatch
	}
	held := "/fake/held" + path
	f.Live[held] = id
	f.Holds++
	return netns.NewHeld(held, id, func() {
		f.Mu.Lock()
		defer f.Mu.Unlock()
		delete(f.Live, held)
		f.Released++
	}), nil
}

// Kill makes the namespace at path vanish.
func (f *Netns) Kill(path string) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	delete(f.Live, path)
}

// Fixture is a Manager over the recording plugin, in temp dirs.
type Fixture struct {
	T   testing.TB
	Mgr *attach.Manager
	// Engine and Store are the Manager's CNI engine and record store.
	Engine   *cni.Engine
	Store    *state.Store
	Netns    *Netns
	Cfg      config.Config
	ConfDir  string
	Record   string // the recording plugin's call log
	CacheDir string
	// Src and Sink are Kubernetes mode's (NewKube); nil otherwise.
	Src  *Source
	Sink *Sink
	// Claims are the prepared DRA claims (NewKube); nil otherwise.
	Claims *state.Claims
	// Routes, if set before Reconfigure, replaces netns.SetDefaultRoutes
	// (the fake namespaces are not real).
	Routes func(path, ifname string, gateways []net.IP) error
	// Multus, if set before Reconfigure, says Multus is the node's primary
	// network (the config file's path) or not ("").
	Multus func() string
	// Devices and DeviceInfo, if set before Reconfigure, serve networks
	// of device plugin resources.
	Devices    *Devices
	DeviceInfo attach.DeviceInfoFiles
	// Policy, Firewall and Links turn MultiNetworkPolicy on (WithPolicy).
	Policy   *PolicySource
	Firewall *Firewall
	Links    *Links
}

// Devices is an attach.DeviceSource over a map: resource -> the pod's
// device IDs (every pod gets the same); Err, if set, answers every lookup.
type Devices struct {
	Mu    sync.Mutex
	IDs   map[string][]string
	Err   error
	Calls []string // "namespace/name resource"
	// Derived, if set, makes the devices a DRA driver's: each one's
	// device-info derived from its data.
	Derived func(id string) *deviceinfo.DeviceInfo
}

// Devices implements attach.DeviceSource: a device plugin's devices, or
// with Info a DRA driver's (From names the ID, Info derives device-info).
func (d *Devices) Devices(_ context.Context, pod attach.DevicePod, res string) ([]attach.Device, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	d.Calls = append(d.Calls, pod.Namespace+"/"+pod.Name+" "+res)
	if d.Err != nil {
		return nil, d.Err
	}
	if len(d.IDs[res]) == 0 {
		return nil, fmt.Errorf("resource %q of pod %s/%s: the kubelet allocated no device of the resource to the pod", res, pod.Namespace, pod.Name)
	}
	var out []attach.Device
	for _, id := range d.IDs[res] {
		dev := attach.Device{ID: id}
		if d.Derived != nil {
			dev.From, dev.Info = "ResourceClaim test/claim device "+id, d.Derived(id)
		}
		out = append(out, dev)
	}
	return out, nil
}

// ClaimKey is the key of IDs under which Devices keeps a claim request's
// devices.
func ClaimKey(r cni.ClaimRequest) string { return "claim:" + r.String() }

// ClaimDevices implements attach.DeviceSource: the devices under
// ClaimKey(r), each from the claim request.
func (d *Devices) ClaimDevices(_ context.Context, pod attach.DevicePod, r cni.ClaimRequest) ([]attach.Device, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	key := ClaimKey(r)
	d.Calls = append(d.Calls, pod.Namespace+"/"+pod.Name+" "+key)
	if d.Err != nil {
		return nil, d.Err
	}
	if len(d.IDs[key]) == 0 {
		return nil, fmt.Errorf("pod %s/%s has no claim %q", pod.Namespace, pod.Name, r.Claim)
	}
	var out []attach.Device
	for _, id := range d.IDs[key] {
		dev := attach.Device{ID: id, From: fmt.Sprintf("ResourceClaim %s/%s request %q device test/pool/%s", pod.Namespace, r.Claim, r.Request, id)}
		if d.Derived != nil {
			dev.Info = d.Derived(id)
		}
		out = append(out, dev)
	}
	return out, nil
}

// Log is a logger that discards (what a Manager without Deps.Log uses).
func Log() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

// RecorderNet is a network config of the recording plugin.
func RecorderNet(name, record string, extra map[string]any) map[string]any {
	plugin := map[string]any{"type": "cni-recorder", "recordFile": record, "ip": "10.99.0.5/24"}
	for k, v := range extra {
		plugin[k] = v
	}
	return map[string]any{"cniVersion": "1.1.0", "name": name, "plugins": []any{plugin}}
}

// New writes the given networks (name -> plugin extras) and attaches them
// in the order given.
func New(t testing.TB, nets []string, extras map[string]map[string]any) *Fixture {
	t.Helper()
	root := t.TempDir()
	f := &Fixture{T: t, Netns: NewNetns(), ConfDir: filepath.Join(root, "net.d"),
		Record: filepath.Join(root, "calls.jsonl"), CacheDir: filepath.Join(root, "cache")}
	require.NoError(t, os.MkdirAll(f.ConfDir, 0o755))
	for i, n := range nets {
		testenv.WriteJSON(t, filepath.Join(f.ConfDir, fmt.Sprintf("%02d-%s.conflist", i, n)), RecorderNet(n, f.Record, extras[n]))
	}
	f.Cfg = config.Default()
	f.Cfg.ConfDir, f.Cfg.BinDirs, f.Cfg.CacheDir, f.Cfg.StateDir = f.ConfDir, []string{recorderDir}, f.CacheDir, filepath.Join(root, "state")
	f.Cfg.Networks = nets
	store, err := state.Open(f.Cfg.StateDir)
	require.NoError(t, err)
	engine := cni.New(cni.Options{ConfDir: f.ConfDir, BinDirs: f.Cfg.BinDirs, CacheDir: f.CacheDir})
	skipped, err := engine.Reload(context.Background())
	require.NoError(t, err)
	require.Empty(t, skipped)
	f.Engine, f.Store = engine, store
	f.Mgr = attach.New(f.Cfg, attach.Deps{Engine: engine, Netns: f.Netns, Store: store})
	return f
}

// Deps are the fixture's dependencies, for a Manager of a changed config.
func (f *Fixture) Deps() attach.Deps {
	d := attach.Deps{Engine: f.Engine, Netns: f.Netns, Store: f.Store, Routes: f.Routes, Multus: f.Multus}
	if f.Src != nil {
		d.NADs, d.Sink = f.Src, f.Sink
	}
	if f.Claims != nil {
		d.Claims = f.Claims
	}
	if f.Devices != nil {
		d.Devices = f.Devices
	}
	d.DeviceInfo = f.DeviceInfo
	if f.Firewall != nil {
		d.Policy, d.Firewall, d.LinksUp = f.Policy, f.Firewall, f.Links.SetUp
	}
	return d
}

// Reconfigure rebuilds the Manager after change (unvalidated: the engine
// must hold its rules even for a config Validate would refuse).
func (f *Fixture) Reconfigure(change func(*config.Config)) {
	change(&f.Cfg)
	f.Mgr = attach.New(f.Cfg, f.Deps())
}

// Calls are the recording plugin's calls so far.
func (f *Fixture) Calls() []testenv.Call { return testenv.ReadCalls(f.T, f.Record) }

// Cmds are the calls as "CMD network ifname".
func (f *Fixture) Cmds() []string {
	var out []string
	for _, c := range f.Calls() {
		out = append(out, c.Cmd+" "+c.Network+" "+c.IfName)
	}
	return out
}

// AttachCmds is Cmds without the GC calls a resync makes.
func (f *Fixture) AttachCmds() []string {
	var out []string
	for _, c := range f.Cmds() {
		if !strings.HasPrefix(c, "GC ") {
			out = append(out, c)
		}
	}
	return out
}

// Cached counts libcni's cached attachments of id.
func (f *Fixture) Cached(id string) int {
	atts, err := f.Engine.CachedAttachments(id)
	require.NoError(f.T, err)
	return len(atts)
}

// Pod is a pod sandbox of namespace ns1 with pid.
func Pod(id string, pid uint32) attach.Sandbox {
	return attach.Sandbox{ID: id, Kind: "pod", Pid: pid,
		Pod: cni.PodIdentity{Namespace: "ns1", Name: "pod-" + id, UID: "uid-" + id, InfraID: id}}
}

// NPWGPod is Pod (pid 42) annotated with the NPWG annotation.
func NPWGPod(id, annotation string) attach.Sandbox {
	sb := Pod(id, 42)
	sb.IPs = []string{"10.244.0.7", "fd00:244::7"}
	sb.Annotations = map[string]string{plan.AnnotationNPWGNetworks: annotation}
	return sb
}

// NewKube is a fixture whose Manager runs in Kubernetes mode with the NPWG
// annotation on (confDir holds "alpha"), a fake NAD source and a recording
// status sink.
func NewKube(t testing.TB, tune func(*config.Config)) *Fixture {
	t.Helper()
	f := New(t, []string{"alpha"}, nil)
	f.Cfg.PodSelection, f.Cfg.RequireAnnotation = true, true
	f.Cfg.PodCapabilities = config.KnownCapabilities()
	f.Cfg.Kubernetes = &config.KubernetesConfig{NPWGAnnotation: true, SharedNamespaces: []string{"shared"}}
	f.Cfg.PodCNIArgs = []string{"vlan", "label", "owner"}
	if tune != nil {
		tune(&f.Cfg)
	}
	require.NoError(t, f.Cfg.Validate())
	f.Src, f.Sink = &Source{NADs: map[plan.NADRef]*cni.Network{}}, &Sink{}
	claims, err := state.OpenClaims(f.Cfg.StateDir)
	require.NoError(t, err)
	f.Claims = claims
	f.Mgr = attach.New(f.Cfg, f.Deps())
	return f
}

// NAD adds a NetworkAttachmentDefinition whose config is the recording
// plugin's, named cniName, with extra plugin keys.
func (f *Fixture) NAD(ref plan.NADRef, cniName string, extra map[string]any) *cni.Network {
	f.T.Helper()
	data, err := json.Marshal(RecorderNet(cniName, f.Record, extra))
	require.NoError(f.T, err)
	n, err := cni.Parse(data)
	require.NoError(f.T, err)
	f.Src.Set(ref, n)
	return n
}

// Claim records a prepared claim of sb's pod: one device per network
// (a config dir network's name or a NAD's "namespace/name"), each with
// the given NetworkConfig keys (JSON object members, "" for none).
func (f *Fixture) Claim(sb attach.Sandbox, name string, networks map[string]string) *state.PreparedClaim {
	f.T.Helper()
	pc := &state.PreparedClaim{UID: "uid-" + name, Namespace: sb.Pod.Namespace, Name: name, Pods: []string{sb.Pod.UID}}
	for _, n := range slices.Sorted(maps.Keys(networks)) {
		d := state.ClaimDevice{Ref: state.ClaimRef{Namespace: sb.Pod.Namespace, Name: name, UID: pc.UID, Request: "req-" + n,
			Driver: "nri-cni.io", Pool: "node-1", Device: "dev-" + strings.ReplaceAll(n, "/", "-")}, Network: n}
		if keys := networks[n]; keys != "" {
			d.Configs = []state.ClaimConfig{{Raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig",` + keys + `}`)}}
		}
		pc.Devices = append(pc.Devices, d)
	}
	require.NoError(f.T, f.Claims.Put(pc))
	return pc
}

// Source is a plan.NADSource over a map; Unsynced answers
// plan.ErrSourceNotSynced. It counts lookups (all from memory).
type Source struct {
	Mu       sync.Mutex
	Unsynced bool
	NADs     map[plan.NADRef]*cni.Network
	Lookups  int
}

// Network implements plan.NADSource.
func (s *Source) Network(ref plan.NADRef) (*cni.Network, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.Lookups++
	if s.Unsynced {
		return nil, plan.ErrSourceNotSynced
	}
	n, ok := s.NADs[ref]
	if !ok {
		return nil, plan.ErrNoSuchNAD
	}
	return n, nil
}

// Set adds (n nil: removes) a NetworkAttachmentDefinition.
func (s *Source) Set(ref plan.NADRef, n *cni.Network) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if n == nil {
		delete(s.NADs, ref)
		return
	}
	s.NADs[ref] = n
}

// Sink records what the Manager reports.
type Sink struct {
	mu       sync.Mutex
	status   []attach.PodNetworks
	failures []attach.AttachFailure
	notes    []attach.PodNote
	started  []attach.StartedWithout
	policy   []PolicyEvent
}

// StartedWithoutNetworks implements attach.StartedWithoutSink.
func (s *Sink) StartedWithoutNetworks(w attach.StartedWithout) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = append(s.started, w)
}

// Started returns the pods reported with containers started before their
// networks.
func (s *Sink) Started() []attach.StartedWithout {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attach.StartedWithout(nil), s.started...)
}

// Noted implements attach.NoteSink.
func (s *Sink) Noted(n attach.PodNote) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, n)
}

// Notes returns the planning warnings reported so far.
func (s *Sink) Notes() []attach.PodNote {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attach.PodNote(nil), s.notes...)
}

// PodNetworks implements attach.StatusSink.
func (s *Sink) PodNetworks(p attach.PodNetworks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = append(s.status, p)
}

// AttachFailed implements attach.StatusSink.
func (s *Sink) AttachFailed(f attach.AttachFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, f)
}

// Snapshot returns what was reported so far.
func (s *Sink) Snapshot() ([]attach.PodNetworks, []attach.AttachFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attach.PodNetworks(nil), s.status...), append([]attach.AttachFailure(nil), s.failures...)
}

// WithDeadline is a request context as the runtime gives one.
func WithDeadline(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor runs f and fails the test if it has not returned within limit:
// for calls that, broken, block forever (not a performance assertion).
func WaitFor(t testing.TB, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s: still blocked after %s", what, limit)
	}
}

// DELs are the DEL calls among cmds (Cmds).
func DELs(cmds []string) []string {
	var out []string
	for _, c := range cmds {
		if strings.HasPrefix(c, "DEL ") {
			out = append(out, c)
		}
	}
	return out
}
