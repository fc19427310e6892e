package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/kube/mnp"
	"github.com/nri-cni/nri-cni/metrics"
	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/nft"
)

// policyMode is MultiNetworkPolicy enforcement wired: the engine gets
// Source and Firewall before it is built; the watches and the dirty queue
// run once it exists (start).
type policyMode struct {
	m        *mnp.MNP
	source   *mnp.Source
	firewall *nft.Programmer
	engine   *lateEngine
	observer *lateObserver
}

// startPolicy builds MultiNetworkPolicy's node side for the
// kubernetes.multiNetworkPolicy section (nil when it is off).
func startPolicy(k *config.KubernetesConfig, clients *kube.Clients, mode *kube.Mode, log *logrus.Entry) (*policyMode, error) {
	if !k.MNPOn() {
		return nil, nil
	}
	opts, err := netpol.OptionsFromConfig(k.MultiNetworkPolicy)
	if err != nil {
		return nil, fmt.Errorf("kubernetes.multiNetworkPolicy: %w", err)
	}
	pc, err := mnp.NewPolicyClient(clients.REST)
	if err != nil {
		return nil, fmt.Errorf("kubernetes.multiNetworkPolicy: %w", err)
	}
	fw, err := nft.New()
	if err != nil {
		return nil, fmt.Errorf("kubernetes.multiNetworkPolicy: %w", err)
	}
	p := &policyMode{firewall: fw, engine: &lateEngine{}, observer: &lateObserver{}}
	p.m = mnp.New(clients.Core, pc, mnp.Options{Node: clients.NodeName, Limits: opts.Limits, PropagationDelay: k.MultiNetworkPolicy.Delay(),
		Applier: p.engine, Quarantiner: p.engine, Recorder: mode.Recorder, Observer: p.observer, Log: log.WithField("component", "multinetworkpolicy")})
	p.source = p.m.Source(opts)
	log.WithFields(logrus.Fields{"propagationDelay": k.MultiNetworkPolicy.Delay(), "acceptICMP": opts.AcceptICMP,
		"acceptICMPv6": opts.AcceptICMPv6, "allow": len(opts.Allow)}).
		Info("MultiNetworkPolicy on: rules programmed in each pod's netns before its secondary interfaces exist")
	return p, nil
}

// ready is part of readiness: not ready until the policies, namespaces and
// pods have been listed (pods attached meanwhile get the deny-all table).
func (p *policyMode) ready() error {
	if p.m.Synced() {
		return nil
	}
	if err := p.m.SyncError(); err != nil {
		return fmt.Errorf("the MultiNetworkPolicy caches have not synced: %w", err)
	}
	return errors.New("the MultiNetworkPolicy caches have not synced yet")
}

// start runs the watches and the queue against the engine until ctx ends.
func (p *policyMode) start(ctx context.Context, mgr *attach.Manager, m *metrics.Metrics) {
	p.engine.mgr.Store(mgr)
	if m != nil {
		p.observer.m.Store(m)
	}
	go p.m.Run(ctx)
}

// removePolicies deletes the tables nri-cni programmed while
// MultiNetworkPolicy was on (it is off now): pods stay as they would be
// without the feature. A pod busy at that moment keeps its table until the
// next start (logged).
func removePolicies(ctx context.Context, mgr *attach.Manager, log *logrus.Entry) {
	fw, err := nft.New()
	if err != nil {
		log.WithError(err).Warn("MultiNetworkPolicy off: the tables programmed while it was on cannot be removed")
		return
	}
	removed, err := mgr.RemovePolicies(ctx, fw, nil)
	if removed > 0 {
		log.WithField("pods", removed).Info("MultiNetworkPolicy off: the tables programmed while it was on removed")
	}
	if err != nil {
		log.WithError(err).Warn("MultiNetworkPolicy off: some tables programmed while it was on were not removed")
	}
}

// lateEngine is the attach engine for the dirty queue, set once the engine
// is built (the queue runs only after that).
type lateEngine struct {
	mgr atomic.Pointer[attach.Manager]
}

var (
	_ mnp.PolicyApplier = (*lateEngine)(nil)
	_ mnp.Quarantiner   = (*lateEngine)(nil)
	_ mnp.SandboxLister = (*lateEngine)(nil)
)

func (l *lateEngine) ApplyPolicy(ctx context.Context, id string) error {
	return l.mgr.Load().ApplyPolicy(ctx, id)
}

func (l *lateEngine) Quarantine(ctx context.Context, id string) error {
	return l.mgr.Load().Quarantine(ctx, id)
}

func (l *lateEngine) PolicySandboxes() []string { return l.mgr.Load().PolicySandboxes() }

// lateObserver forwards to the metrics once they exist (none: dropped).
type lateObserver struct {
	m atomic.Pointer[metrics.Metrics]
}

var _ mnp.Observer = (*lateObserver)(nil)

func (o *lateObserver) ObserveMNPPropagation(d time.Duration) {
	if m := o.m.Load(); m != nil {
		m.ObserveMNPPropagation(d)
	}
}

func (o *lateObserver) SetMNPQueueDepth(n int) {
	if m := o.m.Load(); m != nil {
		m.SetMNPQueueDepth(n)
	}
}

func (o *lateObserver) SetMNPInvalidPolicies(n int) {
	if m := o.m.Load(); m != nil {
		m.SetMNPInvalidPolicies(n)
	}
}

func (o *lateObserver) MNPEventDropped() {
	if m := o.m.Load(); m != nil {
		m.MNPEventDropped()
	}
}
