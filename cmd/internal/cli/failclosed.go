package cli

// The node's part in fail-closed pods: nri-cni checks that the runtime it
// serves refuses the containers of pods that require nri-cni while nri-cni
// is away (nodeconf: NRI's default validator on, a runtime version that has
// it), and that the running runtime loaded that configuration (its process,
// the peer of nri-cni's NRI connection, started after the files' last
// change); and, with the await hook on, that the hook's binary can run on
// the node. It checks at every connection and every nodeCheckInterval,
// warns naming what is missing, sets the metrics, and keeps the answer for
// `nri-cni status` (a hidden file in the state dir).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/hook/nri"
	"github.com/nri-cni/nri-cni/loop"
	"github.com/nri-cni/nri-cni/metrics"
	"github.com/nri-cni/nri-cni/nodeconf"
)

// nodeCheckFile holds the last check, in the state dir (hidden: not a record).
const nodeCheckFile = ".node-check"

// nodeCheckInterval is how often a running nri-cni checks the node again
// (a few small file reads and stats): node-setup run since, a runtime
// restarted, the await hook's binary removed or put back.
const nodeCheckInterval = 30 * time.Second

// nodeCheck is a check's outcome as saved.
type nodeCheck struct {
	Checked time.Time `json:"checked"`
	// Report is the runtime's check (nil: nri-cni has not connected yet).
	Report *nodeconf.Report `json:"report,omitempty"`
	// Hook is the await hook's binary as checked (nil: the hook is off).
	Hook *hookCheck `json:"hook,omitempty"`
}

// hookCheck is the await hook's binary as checked.
type hookCheck struct {
	Path    string `json:"path"`
	Problem string `json:"problem,omitempty"` // "": it can run
}

// checkNode checks the node's runtime (name and version as it reported them
// over NRI, pid its process as seen from the connection; 0: not known) with
// cfg's failClosed paths.
func checkNode(cfg config.Config, runtime, version string, pid int) nodeconf.Report {
	fc := cfg.FailClosed
	o := nodeconf.Options{Runtime: runtime, RuntimeVersion: version, Root: fc.NodeRoot,
		ContainerdConfig: fc.ContainerdConfig, CRIOConfig: fc.CRIOConfig, CRIODropInDir: fc.CRIOConfigDir}
	r := nodeconf.Check(o)
	if r.OK() {
		r.Judge(o, nodeconf.RuntimeProcess(pid))
	}
	return r
}

// awaitHookBinary is the binary the runtime runs as the await hook (a host
// path), "" when the hook is off.
func awaitHookBinary(cfg config.Config) (string, error) {
	fc := cfg.FailClosed
	if !fc.HookOn() || !cfg.BackgroundAttach {
		return "", nil
	}
	if fc.HookPath != "" {
		return fc.HookPath, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("failClosed.hookPath: the running binary's path: %w", err)
	}
	return exe, nil
}

// hookRunnable checks that the host can run the await hook's binary path
// (under failClosed.nodeRoot); its error names the path, the key and what
// nri-cni does meanwhile.
func hookRunnable(cfg config.Config, path string) func() error {
	root, key := cfg.FailClosed.NodeRoot, "failClosed.hookPath"
	if cfg.FailClosed.HookPath == "" {
		key += " (unset: the running binary)"
	}
	return func() error {
		if err := nodeconf.CheckExecutable(root, path); err != nil {
			return fmt.Errorf("the await hook cannot run: %w (%s): containers of pods still being attached wait "+
				"for the attach inside CreateContainer instead (install the binary there; the DaemonSet's install-hook "+
				"init container puts it at /opt/nri-cni/bin)", err, key)
		}
		return nil
	}
}

// logNodeCheck logs rep: one info line when the node fails closed, a
// warning naming every finding otherwise.
func logNodeCheck(log *logrus.Entry, rep nodeconf.Report) {
	l := log.WithFields(logrus.Fields{"runtime": rep.Runtime, "version": rep.RuntimeVersion, "files": rep.Files,
		"state": rep.State()})
	switch rep.State() {
	case nodeconf.StateFailClosed:
		l.Info("fail-closed: the runtime refuses containers of pods that require nri-cni while nri-cni is away")
		return
	case nodeconf.StateRestartPending:
		l.WithField("changed", rep.Changed).Warn("fail-closed: set up, but the runtime started before these files changed: " +
			"restart it (" + nodeconf.RestartCommand(rep.Runtime) + "); until then it runs without the change")
		return
	case nodeconf.StateUnverified:
		l.WithField("why", rep.Running.Unknown).Warn("fail-closed: set up in the files; whether the running runtime loaded them is not known")
		return
	}
	for _, f := range rep.Findings {
		l.WithFields(logrus.Fields{"checked": f.Files, "fix": f.Fix}).Warn("fail-closed: NOT set up on this node: " + f.Problem +
			": a pod created while nri-cni is away (installing, restarting, upgrading) starts its containers without its networks")
	}
}

// saveNodeCheck writes c for `nri-cni status` (atomically; errors are
// the caller's to log).
func saveNodeCheck(stateDir string, c nodeCheck) error {
	c.Checked = c.Checked.UTC()
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(stateDir, nodeCheckFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("saving the node check: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("saving the node check: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving the node check: %w", err)
	}
	return os.Rename(tmp.Name(), filepath.Join(stateDir, nodeCheckFile))
}

// printNodeCheck prints the running nri-cni's last check of the node (what
// `nri-cni status` shows under "fail-closed" and "await hook").
func printNodeCheck(w io.Writer, stateDir string) {
	data, err := os.ReadFile(filepath.Join(stateDir, nodeCheckFile))
	if err != nil {
		fmt.Fprintf(w, "fail-closed: unknown: nri-cni has not connected to a runtime yet (%s: %v)\n", nodeCheckFile, err)
		return
	}
	var c nodeCheck
	if err := json.Unmarshal(data, &c); err != nil {
		fmt.Fprintf(w, "fail-closed: unknown: %s: %v\n", filepath.Join(stateDir, nodeCheckFile), err)
		return
	}
	at := c.Checked.Format(time.RFC3339)
	if c.Report == nil {
		fmt.Fprintf(w, "fail-closed: unknown: nri-cni has not connected to a runtime yet (checked %s)\n", at)
	} else {
		fmt.Fprintf(w, "fail-closed (checked %s): %s", at, c.Report.String())
	}
	switch {
	case c.Hook == nil:
	case c.Hook.Problem != "":
		fmt.Fprintf(w, "await hook (checked %s): NOT RUNNABLE: %s\n", at, c.Hook.Problem)
	default:
		fmt.Fprintf(w, "await hook (checked %s): %s can run\n", at, c.Hook.Path)
	}
}

// nodeWatcher checks the node for a plugin: at every connection (the
// runtime's name and version come with it) and every nodeCheckInterval.
type nodeWatcher struct {
	plugin *nri.Plugin
	m      *metrics.Metrics // nil: none
	log    *logrus.Entry
	// pid is the runtime's process: the peer of the NRI connection (0:
	// not known).
	pid         atomic.Int64
	failsClosed atomic.Bool

	mu       sync.Mutex // guards the fields below and orders the checks
	runtime  string     // from the last connection ("" before the first)
	version  string
	hookPath string       // the await hook's binary ("": off)
	hookOK   func() error // hookRunnable of it
	logged   string       // the last state logged, not logged again
	hookLog  string
}

// watchNode starts checking the node for plugin until ctx ends; it tells
// the plugin (an unprotected pod is a warning only where the node fails
// closed) and the metrics (nil: none) the outcome.
func watchNode(ctx context.Context, plugin *nri.Plugin, m *metrics.Metrics, log *logrus.Entry) *nodeWatcher {
	w := &nodeWatcher{plugin: plugin, m: m, log: log}
	plugin.NodeFailClosed = w.failsClosed.Load
	plugin.OnRuntime = func(runtime, version string) {
		w.mu.Lock()
		w.runtime, w.version = runtime, version
		w.mu.Unlock()
		go w.check()
	}
	go loop.Every(ctx, nodeCheckInterval, nil, false, w.check)
	return w
}

// setHook tells w the await hook's binary (serveHook).
func (w *nodeWatcher) setHook(path string, runnable func() error) {
	w.mu.Lock()
	w.hookPath, w.hookOK = path, runnable
	w.mu.Unlock()
	go w.check()
}

// dial connects to the runtime's NRI socket and learns the runtime's
// process from the connection (external mode; nri.Plugin.Dial).
func (w *nodeWatcher) dial(socket string) (net.Conn, error) {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return nil, err
	}
	pid, err := nodeconf.PeerPid(c)
	if err != nil {
		w.log.WithError(err).Debug("the runtime's process is not known from its NRI connection")
	}
	w.pid.Store(int64(pid))
	return c, nil
}

// check checks the node once (the runtime only while connected) and
// reports the outcome.
func (w *nodeWatcher) check() {
	mgr := w.plugin.Manager()
	if mgr == nil {
		return // not configured yet (pre-launched)
	}
	cfg := mgr.Config()
	w.mu.Lock()
	defer w.mu.Unlock()
	c := nodeCheck{Checked: time.Now()}
	if w.runtime != "" && w.plugin.Connected() {
		rep := checkNode(cfg, w.runtime, w.version, int(w.pid.Load()))
		c.Report = &rep
		w.failsClosed.Store(rep.State() == nodeconf.StateFailClosed)
		if w.m != nil {
			w.m.SetNodeState(string(rep.State()), stateNames())
		}
		if key := string(rep.State()) + "\n" + findings(rep); key != w.logged {
			w.logged = key
			logNodeCheck(w.log, rep)
		}
	}
	if w.hookOK != nil {
		c.Hook = &hookCheck{Path: w.hookPath}
		if err := w.hookOK(); err != nil {
			c.Hook.Problem = err.Error()
		}
		if w.m != nil {
			w.m.SetAwaitHook(w.hookPath, c.Hook.Problem == "")
		}
		if c.Hook.Problem != w.hookLog {
			w.hookLog = c.Hook.Problem
			if c.Hook.Problem != "" {
				w.log.WithField("hook", w.hookPath).Warn(c.Hook.Problem + "; not ready until it can")
			} else {
				w.log.WithField("hook", w.hookPath).Info("the await hook's binary can run")
			}
		}
	}
	if c.Report == nil && c.Hook == nil {
		return
	}
	if err := saveNodeCheck(cfg.StateDir, c); err != nil {
		w.log.WithError(err).Warn("fail-closed: the node check is not saved for nri-cni status")
	}
}

// findings is rep's findings in one string (what changes the log).
func findings(rep nodeconf.Report) string {
	var b strings.Builder
	for _, f := range rep.Findings {
		b.WriteString(f.Problem + "\n")
	}
	return b.String()
}

// stateNames are nodeconf's states as the metric's label values.
func stateNames() []string {
	out := make([]string, len(nodeconf.States))
	for i, s := range nodeconf.States {
		out[i] = string(s)
	}
	return out
}
