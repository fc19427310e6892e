package kube

import (
	"context"
	"fmt"
	"slices"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/state"
)

// DRAEngine is what a node's DRA driver needs of nri-cni's engine
// (attach.Manager): the config dir's networks and their plugins, their
// readiness, CNI STATUS of a NAD's network, and whether a claim's device
// still plans.
type DRAEngine interface {
	dra.ClaimChecker
	Networks() []*cni.Network
	FindPlugin(typ string) (string, error)
	NetworkStatus(ctx context.Context, n *cni.Network) error
	NotReady(network string) error
}

// DRANode is what the DRA driver of one node is wired to: nri-cni's
// engine, Kubernetes mode's NAD cache and status writer, the
// prepared-claim records and the metrics.
type DRANode struct {
	Config  config.Config
	Clients *Clients
	Mode    *Mode
	Claims  *state.Claims
	Engine  DRAEngine
	// Observer, if set, hears the driver's publishing (metrics.Metrics).
	Observer DRAObserver
	Log      *logrus.Entry
	// Serving says whether nri-cni serves the node's runtime now (nil:
	// always): claims are prepared only while it does (dra.Options.Serving).
	Serving func() error
	// PublishOnly publishes the node's ResourceSlice without registering
	// with a kubelet (dra.Options.PublishOnly: the fleet simulation).
	PublishOnly bool
	// FindPlugin and LinkExists, if set, replace the checks against this
	// host's binDirs and interfaces (a simulated node has neither).
	FindPlugin, LinkExists func(string) error
	// Publishing bounds the driver's refreshes and publishes (zero: the
	// defaults; the fleet bench shortens them).
	Publishing dra.PublishLimits
}

// StartDRA starts the DRA driver and keeps this node's ResourceSlice
// current: the config dir's networks (kubernetes.dra.nodeNetworks) and the
// NADs the policy allows, each checked here (plugin binaries, host
// interface, CNI STATUS) before it is published.
func StartDRA(ctx context.Context, n DRANode) (*dra.Driver, error) {
	cfg, eng, mode := n.Config, n.Engine, n.Mode
	d := cfg.Kubernetes.DRA
	status := &dra.StatusCache{Status: eng.NetworkStatus, TTL: cfg.StatusInterval.D()}
	checker := dra.Checker{
		FindPlugin: n.FindPlugin,
		LinkExists: n.LinkExists,
		NotReady: func(c dra.Candidate) error {
			if c.Local {
				return eng.NotReady(c.Net.Name) // the readiness reconciler's answer
			}
			sctx, cancel := context.WithTimeout(ctx, cfg.CNITimeout.D())
			defer cancel()
			return status.NotReady(sctx, c.Net)
		},
	}
	if checker.FindPlugin == nil {
		checker.FindPlugin = func(typ string) error {
			_, err := eng.FindPlugin(typ) // under nri.conf's pluginRoot
			return err
		}
	}
	if checker.LinkExists == nil {
		checker.LinkExists = func(name string) error {
			_, err := netlink.LinkByName(name)
			return err
		}
	}
	o := dra.Options{NodeName: n.Clients.NodeName, Client: n.Clients.Core, Config: d, Claims: n.Claims,
		Planner: eng, Sink: mode.Status, Checker: checker, Limits: cfg.Limits, Log: n.Log,
		PublishOnly: n.PublishOnly, Serving: n.Serving, Publishing: n.Publishing,
		Reporter: newDRAReport(n.Clients.NodeName, n.Observer, mode.Status.eventRecorder(), mode.Source.nadRef),
		Candidates: func() []dra.Candidate {
			return draCandidates(eng.Networks(), mode.Source, d, cfg.Kubernetes.SharedNamespaces)
		}}
	if d.PublishNADs() {
		// The first publish waits for the NAD cache (bounded: without the
		// CRD the config dir's networks go out after a while), so a restart
		// republishes nothing; the NADs are published again at every change.
		o.WaitFor = mode.Source.WaitForSync
	}
	drv := dra.New(o)
	if d.PublishNADs() {
		mode.Source.OnChange(drv.Kick)
		go func() {
			if mode.Source.WaitForSync(ctx) == nil {
				drv.Kick()
			}
		}()
	}
	if err := drv.Start(ctx); err != nil {
		return nil, err
	}
	if !n.PublishOnly {
		// Claim records against the kubelet's checkpoint (records.go).
		go drv.KeepRecords(ctx, dra.CheckpointPath(d.KubeletRoot()), 0)
	}
	return drv, nil
}

// draCandidates lists what the node might publish: the config dir's
// networks (nodeNetworks, or all), then the NADs (those of shared
// namespaces marked: claims of every namespace may get them).
func draCandidates(local []*cni.Network, nads *NADSource, d *config.DRAConfig, shared []string) []dra.Candidate {
	var out []dra.Candidate
	byName := map[string]*cni.Network{}
	for _, n := range local {
		byName[n.Name] = n
		if len(d.NodeNetworks) == 0 || slices.Contains(d.NodeNetworks, n.Name) {
			out = append(out, dra.Candidate{Network: n.Name, Net: n, Local: true})
		}
	}
	for _, name := range d.NodeNetworks {
		if byName[name] == nil {
			out = append(out, dra.Candidate{Network: name, Err: fmt.Errorf("%w %q (kubernetes.dra.nodeNetworks)", cni.ErrUnknownNetwork, name)})
		}
	}
	if !d.PublishNADs() {
		return out
	}
	for _, e := range nads.List() {
		c := dra.Candidate{Network: e.Ref.String(), Namespace: e.Ref.Namespace, Net: e.Network, Err: e.Err,
			Shared: slices.Contains(shared, e.Ref.Namespace)}
		if c.Err == nil && c.Net.List == nil { // empty spec.config: the config dir network of its name
			c.Local = true
			if c.Net = byName[e.Network.Name]; c.Net == nil {
				c.Err = fmt.Errorf("empty spec.config and %w %q in the config dir", cni.ErrUnknownNetwork, e.Network.Name)
			}
		}
		out = append(out, c)
	}
	return out
}
