package cli

// The node's part in fail-closed pods: at every connection nri-cni checks
// that the runtime it serves refuses the containers of pods that require
// nri-cni while nri-cni is away (nodeconf: NRI's default validator on, a
// runtime version that has it), warns naming what is missing, and keeps the
// answer for `nri-cni status` (a hidden file in the state dir).

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/hook/nri"
	"github.com/nri-cni/nri-cni/metrics"
	"github.com/nri-cni/nri-cni/nodeconf"
)

// nodeCheckFile holds the last check, in the state dir (hidden: not a record).
const nodeCheckFile = ".node-check"

// nodeCheck is a check's outcome as saved.
type nodeCheck struct {
	Checked time.Time       `json:"checked"`
	Report  nodeconf.Report `json:"report"`
}

// checkNode checks the node's runtime (name and version as it reported them
// over NRI) with cfg's failClosed paths.
func checkNode(cfg config.Config, runtime, version string) nodeconf.Report {
	fc := cfg.FailClosed
	return nodeconf.Check(nodeconf.Options{Runtime: runtime, RuntimeVersion: version, Root: fc.NodeRoot,
		ContainerdConfig: fc.ContainerdConfig, CRIOConfig: fc.CRIOConfig, CRIODropInDir: fc.CRIOConfigDir})
}

// logNodeCheck logs rep: one info line when the node fails closed, a
// warning naming every finding otherwise.
func logNodeCheck(log *logrus.Entry, rep nodeconf.Report) {
	l := log.WithFields(logrus.Fields{"runtime": rep.Runtime, "version": rep.RuntimeVersion, "files": rep.Files})
	if rep.OK() {
		l.Info("fail-closed: the runtime refuses containers of pods that require nri-cni while nri-cni is away")
		return
	}
	for _, f := range rep.Findings {
		l.WithFields(logrus.Fields{"checked": f.Files, "fix": f.Fix}).Warn("fail-closed: NOT set up on this node: " + f.Problem +
			": a pod created while nri-cni is away (installing, restarting, upgrading) starts its containers without its networks")
	}
}

// saveNodeCheck writes rep for `nri-cni status` (atomically; errors are
// the caller's to log).
func saveNodeCheck(stateDir string, rep nodeconf.Report, at time.Time) error {
	data, err := json.MarshalIndent(nodeCheck{Checked: at.UTC(), Report: rep}, "", "  ")
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
// `nri-cni status` shows under "fail-closed").
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
	fmt.Fprintf(w, "fail-closed (checked %s): %s", c.Checked.Format(time.RFC3339), c.Report.String())
}

// watchNode checks the node at every connection of plugin (the runtime's
// name and version come with it) in the background, and tells the plugin
// (an unprotected pod is a warning only where the node fails closed) and
// the metrics (nil: none) the outcome.
func watchNode(plugin *nri.Plugin, m *metrics.Metrics, log *logrus.Entry) {
	var failsClosed atomic.Bool
	plugin.NodeFailClosed = failsClosed.Load
	plugin.OnRuntime = func(runtime, version string) {
		mgr := plugin.Manager()
		if mgr == nil {
			return
		}
		cfg := mgr.Config()
		go func() {
			rep := checkNode(cfg, runtime, version)
			failsClosed.Store(rep.OK())
			if m != nil {
				m.SetNodeFailOpen(!rep.OK())
			}
			logNodeCheck(log, rep)
			if err := saveNodeCheck(cfg.StateDir, rep, time.Now()); err != nil {
				log.WithError(err).Warn("fail-closed: the node check is not saved for nri-cni status")
			}
		}()
	}
}
