package attach

// The CNI side of the engine: every ADD and DEL bounded by cniTimeout and
// the runtime's deadline, observed (metrics), "already gone" counted as done;
// teardown of a record's networks. Callers hold the sandbox's lock.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// MetricsNADLabel is the network label of every network that is not one
// of confDir's: NetworkAttachmentDefinitions name theirs, and a label per
// tenant-chosen name would let tenants grow the metrics without bound.
const MetricsNADLabel = "nad"

// ops runs CNI operations for the Manager.
type ops struct {
	cfg     config.Config
	engine  CNI
	planner *plan.Planner
	ns      NetnsResolver
	store   Records
	log     *logrus.Entry
	margin  time.Duration
	obs     Observer // nil: none
	devs    devices
}

func (o *ops) observe(op, network string, err error, d time.Duration) {
	if o.obs == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	o.obs.Op(op, o.metricsLabel(network), result, d)
}

// metricsLabel is network's metrics label: its name if confDir loads it.
func (o *ops) metricsLabel(network string) string {
	for _, n := range o.engine.Networks() {
		if n.Name == network {
			return network
		}
	}
	return MetricsNADLabel
}

// add runs one bounded ADD.
func (o *ops) add(ctx context.Context, n *cni.Network, a cni.Attachment) (*cni.Result, error) {
	cctx, cancel, err := cni.Budget(ctx, o.cfg.CNITimeout.D(), o.margin)
	if err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	defer cancel()
	start := time.Now()
	res, err := o.engine.Add(cctx, n, a)
	o.observe("add", n.Name, err, time.Since(start))
	if err != nil && cctx.Err() != nil {
		return nil, fmt.Errorf("%w (timed out after %s: cniTimeout or the runtime's deadline)", err, o.cfg.CNITimeout.D())
	}
	return res, err
}

// teardown DELs rec's networks in reverse order (all at once with
// parallelAttach). A DEL that fails in the namespace is retried with an
// empty one, which still releases IPAM: for a sandbox going away (Stop,
// Remove, GC), whose namespace and the interfaces in it go with it.
func (o *ops) teardown(ctx context.Context, log *logrus.Entry, rec *state.Record, nsPath string) error {
	return o.teardownIn(ctx, log, rec, nsPath, true, nil)
}

// teardownLive DELs rec's networks of a sandbox that lives on (a rollback,
// an earlier attempt undone before the next ADD, a hot-plug removal): in
// its namespace while that is the one recorded, and there only. A DEL
// that fails in it is a failure, not retried with an empty namespace: that
// would release the address and leave the plugin's interface in the pod
// (a bridge veth whose ADD was killed by cniTimeout under load), where it
// blocks every later attach ("interface already exists") and stays on the
// bridge. The caller keeps the record and retries. Without the recorded
// namespace (gone), the DEL runs with an empty one, as for teardown.
func (o *ops) teardownLive(ctx context.Context, log *logrus.Entry, rec *state.Record) error {
	return o.teardownLiveWith(ctx, log, rec, nil)
}

// teardownLiveWith is teardownLive with the networks the ADDs ran, by
// interface name (a rollback has them: the config with the device and the
// element's cni-args in it): a DEL that finds no libcni cache entry (an
// ADD that failed) runs with that config, not with the one loaded now.
func (o *ops) teardownLiveWith(ctx context.Context, log *logrus.Entry, rec *state.Record, ran map[string]*cni.Network) error {
	return o.teardownIn(ctx, log, rec, o.usableNetns(rec), false, ran)
}

// teardownIn DELs rec's networks in nsPath; emptyNetnsRetry: a DEL that
// fails in the namespace is retried with an empty one; ran: the networks
// the ADDs ran, by interface name (nil: unknown).
func (o *ops) teardownIn(ctx context.Context, log *logrus.Entry, rec *state.Record, nsPath string, emptyNetnsRetry bool, ran map[string]*cni.Network) error {
	errs := make([]error, len(rec.Networks))
	one := func(i int) {
		n := rec.Networks[i]
		nl := log.WithFields(logrus.Fields{"network": n.Name, "ifname": n.IfName, "netns": nsPath})
		a := cni.Attachment{ContainerID: rec.ID, IfName: n.IfName, Netns: nsPath, Args: rec.Args, CapabilityArgs: delCaps(n)}
		nadConf := ran[n.IfName]
		if nadConf == nil || nadConf.Name != n.Name {
			nadConf = o.nadFallback(n)
		}
		err := o.delWith(ctx, n.Name, nadConf, a)
		if err != nil && nsPath != "" && emptyNetnsRetry {
			nl.WithError(err).Warn("CNI DEL in the namespace failed, retrying with an empty netns")
			a.Netns = ""
			err = o.delWith(ctx, n.Name, nadConf, a)
		}
		if err != nil {
			nl.WithError(err).Error("CNI DEL failed")
			errs[i] = err
			return
		}
		if err := o.devs.released(rec.ID, n); err != nil {
			nl.WithError(err).Warn("the attachment's device-info file was not removed")
		}
		nl.Info("network detached")
	}
	if !o.cfg.ParallelAttach || len(rec.Networks) < 2 {
		for i := len(rec.Networks) - 1; i >= 0; i-- {
			one(i)
		}
		return errors.Join(errs...)
	}
	var wg sync.WaitGroup
	for i := range rec.Networks {
		wg.Add(1)
		go func() { defer wg.Done(); one(i) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// del runs one bounded DEL; "already gone" counts as done.
func (o *ops) del(ctx context.Context, name string, a cni.Attachment) error {
	return o.delWith(ctx, name, nil, a)
}

// delWith is del with the network to use when libcni cached none for a (a
// NetworkAttachmentDefinition's, whose ADD failed part-way).
func (o *ops) delWith(ctx context.Context, name string, fallback *cni.Network, a cni.Attachment) error {
	cctx, cancel, err := cni.Budget(ctx, o.cfg.CNITimeout.D(), o.margin)
	if err != nil {
		return fmt.Errorf("network %q: %w", name, err)
	}
	defer cancel()
	start := time.Now()
	err = o.engine.DelFallback(cctx, name, fallback, a)
	switch {
	case cni.IsAlreadyGone(err):
		err = nil
	case errors.Is(err, cni.ErrSkippedMissing):
		o.log.WithFields(logrus.Fields{"sandbox": a.ContainerID, "network": name, "ifname": a.IfName}).
			WithError(err).Warn("DEL done without the plugins whose binaries are missing")
		err = nil
	case err != nil && cctx.Err() != nil:
		err = fmt.Errorf("%w (timed out after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	o.observe("del", name, err, time.Since(start))
	return err
}

// nadFallback returns the network a DEL falls back to when libcni has no
// cached config for it (an ADD that failed part-way is not cached): the
// NetworkAttachmentDefinition the record names, as the cache has it now.
func (o *ops) nadFallback(n state.Network) *cni.Network {
	if n.NAD == "" {
		return nil
	}
	ns, name, ok := cutRef(n.NAD)
	if !ok {
		return nil
	}
	net, err := o.planner.NAD(plan.NADRef{Namespace: ns, Name: name})
	if err != nil {
		return nil
	}
	if n.DeviceID != "" {
		if net, err = net.WithDevice(n.DeviceID); err != nil {
			return nil
		}
	}
	return net
}

// usableNetns returns the recorded netns path if it still names the same,
// non-host namespace; otherwise "" (DEL with an empty netns, from the cache).
func (o *ops) usableNetns(rec *state.Record) string {
	if rec.Netns == "" {
		return ""
	}
	ns, err := o.ns.Check(rec.Netns)
	if err != nil {
		return ""
	}
	if rec.NetnsIno != 0 && (ns.ID.Dev != rec.NetnsDev || ns.ID.Ino != rec.NetnsIno) {
		return ""
	}
	return ns.Path
}

func cutRef(s string) (ns, name string, ok bool) {
	ns, name, ok = strings.Cut(s, "/")
	return ns, name, ok && ns != "" && name != ""
}

// attempted keeps the networks whose ADD ran: it succeeded, or it failed
// for another reason than having no time left to start (cni.ErrNoTime: the
// plugin was never executed). The networks after a failure in a serial
// attach have neither a result nor an error.
func attempted(nets []state.Network, errs []error, results []*cni.Result) []state.Network {
	var out []state.Network
	for i, n := range nets {
		if results[i] != nil || (errs[i] != nil && !errors.Is(errs[i], cni.ErrNoTime)) {
			out = append(out, n)
		}
	}
	return out
}

// fromResult records what res says of n's interface: its addresses, MAC,
// MTU, DNS and default routes.
func fromResult(n *state.Network, res *cni.Result) {
	n.IPs, n.Mac, n.MTU, n.DNS, n.ResultGateways = res.IPs, res.Mac, res.MTU, dnsOf(res), res.DefaultGateways
}

// dnsOf keeps a result's DNS section if it says anything.
func dnsOf(res *cni.Result) *state.DNS {
	d := res.DNS
	if len(d.Nameservers) == 0 && d.Domain == "" && len(d.Search) == 0 && len(d.Options) == 0 {
		return nil
	}
	return &state.DNS{Nameservers: d.Nameservers, Domain: d.Domain, Search: d.Search, Options: d.Options}
}
