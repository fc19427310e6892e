package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/hook/nri"
	"github.com/nri-cni/nri-cni/reconcile"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// env is one test's private world: a bridge network with its own subnet,
// IPAM dir, CNI cache, state dir, NRI socket, runtime side and plugin.
type env struct {
	t        *testing.T
	root     string
	bridge   string
	subnet   *net.IPNet
	ipamDir  string
	record   string
	cfg      config.Config
	runtime  *adaptation.Adaptation
	mgr      *attach.Manager
	engine   *cni.Engine // mgr's
	netName  string
	waitSync func()

	pluginDir, pluginConfDir string
	proc                     *exec.Cmd
	proxy                    *testenv.UnixProxy
	metricsAddr              string
}

type envOpts struct {
	recorder map[string]any // extra keys for the recorder plugin chained after bridge
	// recorderBinDir replaces the shared dir of the recorder plugin.
	recorderBinDir string
	// external: run bin/nri-cni as a separate `nri-cni run` process.
	external bool
	// prelaunch: instead of running the plugin in-process, install the
	// nri-cni binary as <pluginDir>/10-nri-cni with its config in
	// <configDir>/10-nri-cni.conf and let the runtime side launch it.
	prelaunch bool
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	testenv.RequireRoot(t)
	cniDir := testenv.CNIPluginsDir(t)
	// Unix socket paths are short: keep the root under /tmp.
	root, err := os.MkdirTemp("", "nc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })

	e := &env{t: t, root: root, bridge: testenv.UniqueName("nctb"), netName: testenv.UniqueName("sec"),
		ipamDir: filepath.Join(root, "ipam"), record: filepath.Join(root, "calls.jsonl")}
	_, e.subnet, _ = net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(50), rand.IntN(256)))
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(e.bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})

	confDir := filepath.Join(root, "net.d")
	require.NoError(t, os.MkdirAll(confDir, 0o755))
	rec := map[string]any{"type": "cni-recorder", "recordFile": e.record}
	for k, v := range o.recorder {
		rec[k] = v
	}
	testenv.WriteJSON(t, filepath.Join(confDir, "10-sec.conflist"), map[string]any{
		"cniVersion": "1.0.0", "name": e.netName,
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": e.bridge, "isGateway": false, "ipMasq": false,
				"ipam": map[string]any{"type": "host-local", "subnet": e.subnet.String(), "dataDir": e.ipamDir}},
			rec,
		},
	})

	e.cfg = config.Default()
	recDir := recorderDir
	if o.recorderBinDir != "" {
		recDir = o.recorderBinDir
	}
	e.cfg.ConfDir, e.cfg.BinDirs = confDir, []string{cniDir, recDir}
	e.cfg.CacheDir, e.cfg.StateDir = filepath.Join(root, "cache"), filepath.Join(root, "state")
	e.cfg.CNITimeout = config.Duration(1500 * time.Millisecond)
	if o.prelaunch {
		e.installDropIn()
		e.startRuntime()
		e.mgr = e.offlineManager()
		return e
	}
	e.startRuntime()
	if o.external {
		e.startExternalBinary()
		e.mgr = e.offlineManager()
		return e
	}
	e.startPlugin()
	return e
}

// startExternalBinary runs `nri-cni run` against the test's socket.
func (e *env) startExternalBinary() {
	t := e.t
	bin, err := testenv.GoBuild(e.root, "./cmd/nri-cni", "nri-cni")
	require.NoError(t, err)
	cfgPath := filepath.Join(e.root, "nri.conf")
	e.cfg.LogFile, e.cfg.LogLevel = filepath.Join(e.root, "nri-cni.log"), "debug"
	testenv.WriteJSON(t, cfgPath, e.cfg)
	// The plugin dials a proxy, so restartRuntime can drop its connection.
	e.proxy = testenv.NewUnixProxy(t, filepath.Join(e.root, "proxy.sock"), filepath.Join(e.root, "nri.sock"))
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free loopback port for /metrics
	require.NoError(t, err)
	e.metricsAddr = l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--socket", filepath.Join(e.root, "proxy.sock"),
		"--metrics-addr", e.metricsAddr)
	// No Pdeathsig: it fires when the forking OS thread exits, and netns
	// helpers retire locked threads. Cleanup kills the child by pid.
	stderr, err := os.Create(filepath.Join(e.root, "stderr"))
	require.NoError(t, err)
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = stderr, stderr
	require.NoError(t, cmd.Start())
	e.proc = cmd
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(e.cfg.LogFile)
			out, _ := os.ReadFile(filepath.Join(e.root, "stderr"))
			t.Logf("nri-cni log:\n%s\nstdout/stderr:\n%s", data, out)
		}
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	e.waitSync()
}

// restartRuntime stops the runtime side and starts a new one on the same
// socket, as a containerd restart does.
func (e *env) restartRuntime() {
	e.runtime.Stop()
	e.proxy.DropAll()
	e.startRuntime()
	e.waitSync()
}

// installDropIn puts bin/nri-cni and its config where the runtime side
// discovers pre-launched plugins.
func (e *env) installDropIn() {
	t := e.t
	pluginDir, confDir := filepath.Join(e.root, "plugins"), filepath.Join(e.root, "conf.d")
	require.NoError(t, os.MkdirAll(pluginDir, 0o755))
	require.NoError(t, os.MkdirAll(confDir, 0o755))
	_, err := testenv.GoBuild(pluginDir, "./cmd/nri-cni", "10-nri-cni")
	require.NoError(t, err)
	e.cfg.LogFile, e.cfg.LogLevel = filepath.Join(e.root, "nri-cni.log"), "debug"
	testenv.WriteJSON(t, filepath.Join(confDir, "10-nri-cni.conf"), e.cfg)
	e.pluginDir, e.pluginConfDir = pluginDir, confDir
}

// offlineManager reads the same state and cache as the launched plugin, for
// assertions.
func (e *env) offlineManager() *attach.Manager {
	store, err := state.Open(e.cfg.StateDir)
	require.NoError(e.t, err)
	engine := cni.New(cni.Options{ConfDir: e.cfg.ConfDir, BinDirs: e.cfg.BinDirs, CacheDir: e.cfg.CacheDir})
	e.engine = engine
	return attach.New(e.cfg, attach.Deps{Engine: engine, Store: store})
}

func (e *env) startRuntime() {
	t := e.t
	synced := make(chan struct{}, 4)
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		synced <- struct{}{}
		return err
	}
	updateFn := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	pluginDir, confDir := e.pluginDir, e.pluginConfDir
	if pluginDir == "" {
		pluginDir = filepath.Join(e.root, "empty")
		confDir = pluginDir
		require.NoError(t, os.MkdirAll(pluginDir, 0o755))
	}
	r, err := adaptation.New("nri-cni-test", "v0", syncFn, updateFn,
		adaptation.WithSocketPath(filepath.Join(e.root, "nri.sock")),
		adaptation.WithPluginPath(pluginDir), adaptation.WithPluginConfigPath(confDir))
	require.NoError(t, err)
	// Start syncs the pre-launched plugins (if any) itself, under the
	// runtime's lock: once it returns they are registered.
	require.NoError(t, r.Start())
	t.Cleanup(r.Stop)
	<-synced
	e.runtime = r
	// An external plugin is synced when it connects; it joins the runtime's
	// list right after that sync, under syncLock.
	e.waitSync = func() {
		select {
		case <-synced:
		case <-time.After(10 * time.Second):
			t.Fatal("the plugin did not connect to the NRI socket within 10s")
		}
		r.BlockPluginSync().Unblock()
	}
}

func (e *env) startPlugin() {
	t := e.t
	logger := logrus.New()
	logger.SetLevel(logrus.DebugLevel)
	log := logrus.NewEntry(logger).WithField("test", t.Name())
	built, err := attach.Build(context.Background(), e.cfg, false, attach.Deps{Log: log})
	require.NoError(t, err)
	require.Empty(t, built.Skipped)
	e.mgr, e.engine = built.Manager, built.Engine
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = nri.RunExternal(ctx, nri.New(&nri.Engine{Manager: e.mgr, Resync: reconcile.NewResyncer(e.mgr, log)}, nil, log), filepath.Join(e.root, "nri.sock"), "nri-cni", "10", log)
	}()
	t.Cleanup(func() { cancel(); <-done })
	e.waitSync()
}

// pod is a pod sandbox with a real netns and a process in it.
type pod struct {
	id    string
	netns ns.NetNS
	pid   int
}

func (e *env) newPod() *pod {
	n := testenv.NewNetNS(e.t)
	return &pod{id: testenv.UniqueName("sandbox"), netns: n, pid: testenv.SleepIn(e.t, n.Path())}
}

func (p *pod) nri(pid int, withNetns bool) *api.PodSandbox {
	s := &api.PodSandbox{Id: p.id, Name: "pod-" + p.id, Namespace: "it", Uid: "uid-" + p.id, Pid: uint32(pid),
		Linux: &api.LinuxPodSandbox{}}
	if withNetns {
		s.Linux.Namespaces = []*api.LinuxNamespace{{Type: "network", Path: p.netns.Path()}}
	}
	return s
}

// nriCtx mimics containerd's per-request deadline (plugin_request_timeout).
func nriCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) run(p *pod, pid int) error {
	return e.runtime.RunPodSandbox(nriCtx(e.t), &api.RunPodSandboxRequest{Pod: p.nri(pid, true)})
}

func (e *env) stop(p *pod) error {
	return e.runtime.StopPodSandbox(nriCtx(e.t), &api.StopPodSandboxRequest{Pod: p.nri(0, true)})
}

// waitTornDown waits until p's teardown ended: a Stop whose DELs outlast
// the runtime's deadline answers in time and goes on in the pod's held
// namespace (attach.ErrTeardownContinues), for up to
// attach.HeldTeardownBudget.
func (e *env) waitTornDown(p *pod) {
	e.t.Helper()
	testenv.Eventually(e.t, attach.HeldTeardownBudget+10*time.Second, "the teardown of "+p.id+" to end", func() bool {
		rec, err := e.mgr.Record(p.id)
		return errors.Is(err, state.ErrNotFound) || err == nil && rec.Phase == state.PhaseTornDown
	})
}

func (e *env) remove(p *pod) error {
	return e.runtime.RemovePodSandbox(nriCtx(e.t), &api.RemovePodSandboxRequest{Pod: p.nri(0, false)})
}

// podAddrs returns net1's IPv4 addresses in the pod, or nil if net1 is absent.
func podAddrs(t *testing.T, p *pod) []net.IP {
	var out []net.IP
	require.NoError(t, p.netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("net1")
		if err != nil {
			return nil //nolint:nilerr // absent
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, a := range addrs {
			out = append(out, a.IP)
		}
		if out == nil {
			out = []net.IP{}
		}
		return err
	}))
	return out
}

// ipamFiles lists host-local's allocation files (one per allocated IP).
func (e *env) ipamFiles() []string {
	entries, _ := os.ReadDir(filepath.Join(e.ipamDir, e.netName))
	var out []string
	for _, en := range entries {
		if net.ParseIP(en.Name()) != nil {
			out = append(out, en.Name())
		}
	}
	return out
}

// bridgePorts counts the veths enslaved to the test bridge.
func (e *env) bridgePorts() int {
	br, err := netlink.LinkByName(e.bridge)
	if err != nil {
		return 0
	}
	links, err := netlink.LinkList()
	require.NoError(e.t, err)
	n := 0
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			n++
		}
	}
	return n
}

func (e *env) cacheEntries(id string) int {
	atts, err := e.engine.CachedAttachments(id)
	require.NoError(e.t, err)
	return len(atts)
}
