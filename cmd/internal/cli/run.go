package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/hook/nri"
	"github.com/nri-cni/nri-cni/hostroot"
	"github.com/nri-cni/nri-cni/metrics"
	"github.com/nri-cni/nri-cni/nodeconf"
	"github.com/nri-cni/nri-cni/reconcile"
	"github.com/nri-cni/nri-cni/state"
)

func runExternal(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	cfgPath := fs.String("config", config.DefaultConfigPath, "nri-cni config file (YAML or JSON)")
	socket := fs.String("socket", api.DefaultSocketPath, "the runtime's NRI socket")
	name := fs.String("name", "nri-cni", "plugin name")
	idx := fs.String("idx", "10", "plugin index (two digits): order among NRI plugins")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus /metrics and /healthz on this address (off when empty)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		return a.fail("run: unexpected arguments %q", fs.Args())
	}
	if len(*idx) != 2 || (*idx)[0] < '0' || (*idx)[0] > '9' || (*idx)[1] < '0' || (*idx)[1] > '9' {
		return a.fail("run: --idx %q: want two digits, e.g. 10", *idx)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return a.fail("%v", err)
	}
	// Before Kubernetes mode reads host paths under it (buildManager checks
	// it for the other commands).
	if err := checkPluginRoot(cfg); err != nil {
		return a.fail("%v", err)
	}
	logger, closeLog, err := newLogger(cfg, a.stderr, "")
	if err != nil {
		return a.fail("%v", err)
	}
	defer closeLog()
	log := logrus.NewEntry(logger)
	var deps attach.Deps
	var kube *KubeMode
	if cfg.Kubernetes != nil {
		if a.kube == nil {
			return a.fail("kubernetes: this build of nri-cni has no Kubernetes mode (no API client is linked into it): " +
				"run nri-cni-k8s, the build with it (the DaemonSet's image runs it)")
		}
		if kube, err = a.kube(ctx, cfg, a.getenv, log); err != nil {
			return a.fail("kubernetes: %v", err)
		}
		deps.NADs, deps.Sink, deps.Multus, deps.Claims = kube.NADs, kube.Sink, kube.Multus, kube.Claims
		deps.Devices, deps.DeviceInfo = kube.Devices, kube.DeviceInfo
		deps.Policy, deps.Firewall = kube.Policy, kube.Firewall
	} else {
		log.Debug("Kubernetes mode off (no kubernetes section): no API client")
	}
	built, err := buildManager(ctx, cfg, log, false, deps)
	if err != nil {
		return a.fail("%v", err)
	}
	mgr := built.Manager
	resync := reconcile.NewResyncer(mgr, log)
	plugin := nri.New(&nri.Engine{Manager: mgr, Resync: resync}, nil, log)
	plugin.Name, plugin.Idx = *name, *idx
	var m *metrics.Metrics
	if *metricsAddr != "" {
		// Before anything runs that reports to it.
		m = metrics.New(func() float64 { return attachedNetworks(mgr) }, func() float64 { return float64(mgr.PendingTeardowns()) })
		mgr.SetObserver(m)
		plugin.OnConnection = m.SetConnected
		plugin.OnUnprotected = m.UnprotectedPod
		m.SetReadiness(func() (bool, string) { return serving(plugin, kube) })
	}
	watch := watchNode(ctx, plugin, m, log)
	plugin.Dial = watch.dial
	if err := serveHook(ctx, plugin, cfg, log, watch); err != nil {
		return a.fail("%v", err)
	}
	if kube != nil && kube.Start != nil {
		if err := kube.Start(Started{Manager: mgr, Resync: resync, Metrics: m, Serving: func() error {
			if ok, why := plugin.Serving(); !ok {
				return errors.New(why)
			}
			return nil
		}}); err != nil {
			return a.fail("kubernetes: %v", err)
		}
	}
	if err := startWatchers(ctx, built, log); err != nil {
		return a.fail("%v", err)
	}
	dumpStatsOnSIGUSR1(ctx, func() *attach.Manager { return mgr }, log)
	if m != nil {
		stop, err := metrics.Serve(ctx, *metricsAddr, m)
		if err != nil {
			return a.fail("--metrics-addr: %v", err)
		}
		defer stop()
		log.WithField("addr", *metricsAddr).Info("serving /metrics and /healthz")
	}
	log.WithFields(logrus.Fields{"socket": *socket, "plugin": *idx + "-" + *name, "version": buildVersion()}).Info("nri-cni starting")
	go releaseAfterStart(ctx, log)
	err = nri.RunExternal(ctx, plugin, *socket, *name, *idx, log)
	finishAttaches(mgr, log)
	if err != nil {
		log.WithError(err).Error("nri-cni stopped")
		return 1
	}
	log.Info("nri-cni stopped")
	return 0
}

// shutdownWait bounds how long a stopping nri-cni lets the background
// attaches in flight finish. Short: while it waits, the node has no nri-cni
// serving (a rolling upgrade starts the new pod once this one is gone), and
// the new one finishes what is left (its resync attaches pods in parallel;
// an attach cut short is undone and redone).
const shutdownWait = 5 * time.Second

// finishAttaches lets the background attaches in flight end (or roll back)
// before the process exits, so a rolling upgrade leaves no pod half
// attached for the next nri-cni to undo. One cut short is still finished by
// the next nri-cni (its record stays in phase adding).
func finishAttaches(mgr *attach.Manager, log *logrus.Entry) {
	done := make(chan struct{})
	go func() { mgr.Background().WaitIdle(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownWait):
		log.WithField("waited", shutdownWait).Warn("stopping with background attaches still in flight: the next nri-cni finishes them")
	}
}

// prelaunched runs as a plugin the runtime started from its plugin dir: no
// arguments, no PATH, stdout/stderr discarded, config via Configure. Until
// the config names the log file, log lines are held in memory; they go to
// that file (default /var/log/nri-cni.log) once it is known.
func prelaunched(ctx context.Context, a *app) int {
	runCtx := ctx
	sink := &logSink{}
	logger := logrus.New()
	logger.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	logger.SetOutput(sink)
	var logFile *os.File
	defer func() {
		if !sink.Attached() { // never configured: keep what was logged
			if f, err := openLog(config.DefaultPrelaunchedLogFile); err == nil {
				sink.Attach(f)
				logFile = f
			}
		}
		if logFile != nil {
			_ = logFile.Close()
		}
	}()
	log := logrus.NewEntry(logger).WithField("plugin", a.getenv(api.PluginIdxEnvVar)+"-"+a.getenv(api.PluginNameEnvVar))
	var plugin *nri.Plugin // set below; configured before its first event
	var watch *nodeWatcher // likewise
	configure := func(ctx context.Context, text string) (*nri.Engine, error) {
		cfg, err := config.Parse([]byte(text))
		if err != nil {
			return nil, fmt.Errorf("config from the runtime (%s.conf): %w", a.getenv(api.PluginNameEnvVar), err)
		}
		if !sink.Attached() {
			file := cfg.LogFile
			if file == "" {
				file = config.DefaultPrelaunchedLogFile
			}
			f, err := openLog(file)
			if err != nil {
				return nil, err
			}
			sink.Attach(f)
			logFile = f
		}
		level, _ := logrus.ParseLevel(cfg.LogLevel)
		logger.SetLevel(level)
		if cfg.Kubernetes != nil {
			// A pre-launched plugin gets no environment (no NODE_NAME, no
			// in-cluster service address) and is reconfigured per connection.
			return nil, fmt.Errorf("config from the runtime: the kubernetes section needs `nri-cni run` (external plugin, e.g. the DaemonSet); remove it for the pre-launched plugin")
		}
		built, err := buildManager(ctx, cfg, log, false, attach.Deps{})
		if err != nil {
			return nil, err
		}
		mgr := built.Manager
		if err := serveHook(runCtx, plugin, cfg, log, watch); err != nil {
			return nil, err
		}
		// The watchers live as long as the process, not the request.
		return &nri.Engine{Manager: mgr, Resync: reconcile.NewResyncer(mgr, log)}, startWatchers(runCtx, built, log)
	}
	log.WithField("version", buildVersion()).Info("nri-cni starting (pre-launched)")
	plugin = nri.New(nil, configure, log)
	plugin.Name, plugin.Idx = a.getenv(api.PluginNameEnvVar), a.getenv(api.PluginIdxEnvVar)
	watch = watchNode(runCtx, plugin, nil, log)
	if fd, err := strconv.Atoi(a.getenv(api.PluginSocketEnvVar)); err == nil {
		// The runtime made the socket pair: it is the peer.
		if pid, err := nodeconf.PeerPidFd(fd); err == nil {
			watch.pid.Store(int64(pid))
		}
	}
	dumpStatsOnSIGUSR1(ctx, plugin.Manager, log)
	if err := nri.RunPrelaunched(ctx, plugin); err != nil {
		if nri.ClosedByRuntime(err) {
			// The runtime shutting down or restarting (it relaunches us).
			log.WithField("reason", err).Info("the runtime closed the connection: nri-cni stopped")
			return 0
		}
		log.WithError(err).Error("nri-cni stopped")
		return 1
	}
	log.Info("nri-cni stopped")
	return 0
}

// serveHook sets up the await hook (failClosed.hookSocket, with
// backgroundAttach): the plugin answers the hook on its socket until ctx
// ends and adds it to containers whose pod is still being attached. A
// reconfigured pre-launched plugin keeps the socket it serves.
func serveHook(ctx context.Context, plugin *nri.Plugin, cfg config.Config, log *logrus.Entry, watch *nodeWatcher) error {
	fc := cfg.FailClosed
	if !fc.HookOn() || plugin.Hook.Socket != "" {
		return nil
	}
	if !cfg.BackgroundAttach {
		log.Warn("failClosed.hookSocket is set but backgroundAttach is off: the await hook is not used (containers wait for the attach in CreateContainer)")
		return nil
	}
	path, err := awaitHookBinary(cfg)
	if err != nil {
		return err
	}
	if err := plugin.ServeAwait(ctx, fc.HookSocket); err != nil {
		return fmt.Errorf("failClosed.hookSocket: %w", err)
	}
	runnable := hookRunnable(cfg, path)
	plugin.Hook = nri.Hook{Path: path, Socket: fc.HookSocket, Timeout: fc.HookTimeout.D(), Runnable: runnable}
	watch.setHook(path, runnable)
	log.WithFields(logrus.Fields{"socket": fc.HookSocket, "hook": path}).Info("await hook on: a container whose pod is still being attached waits for it in an OCI hook, outside NRI")
	return nil
}

// serving is the readiness probe's answer: the plugin connected and
// synchronized with the runtime, the await hook's binary (if the hook is
// on) able to run, and Kubernetes mode (if on) ready.
func serving(plugin *nri.Plugin, kube *KubeMode) (bool, string) {
	ok, why := plugin.Serving()
	if plugin.Hook.Runnable != nil {
		if err := plugin.Hook.Runnable(); err != nil {
			ok, why = false, fmt.Sprintf("%s; %v", why, err)
		}
	}
	if !ok {
		return false, why
	}
	if kube != nil && kube.Ready != nil {
		if err := kube.Ready(); err != nil {
			return false, fmt.Sprintf("%s; Kubernetes mode not ready: %v", why, err)
		}
	}
	return true, why
}

func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("logFile: %w", err)
	}
	return f, nil
}

// buildManager opens the state dir, records the host netns and loads the CNI
// configs. Invalid config files are skipped with a warning naming each.
// oneShot (the hook, gc, status: one invocation each) skips the per-plugin
// VERSION execs and takes a missing confDir for an empty one: a container
// that asks for no network by name must never fail on nri-cni's own missing
// config. The plugin (not oneShot) refuses to start without confDir, so a
// mistyped path is seen at once; pods that ask for nothing are not failed
// by that, and the node's validator holds those that require nri-cni.
func buildManager(ctx context.Context, cfg config.Config, log *logrus.Entry, oneShot bool, deps attach.Deps) (*attach.Built, error) {
	if err := checkPluginRoot(cfg); err != nil {
		return nil, err
	}
	deps.Log = log
	mgr, err := attach.Build(ctx, cfg, oneShot, deps)
	if err != nil {
		return nil, err
	}
	for _, e := range mgr.Skipped {
		if errors.Is(e, cni.ErrNoConfDir) {
			if !oneShot {
				return nil, e
			}
			log.WithField("confDir", cfg.ConfDir).Info("confDir does not exist: no CNI network loaded")
			continue
		}
		log.WithError(e).Warn("skipping invalid CNI config")
	}
	names := []string{}
	for _, n := range mgr.Engine.Networks() {
		names = append(names, n.Name)
	}
	if len(cfg.Networks) > 0 {
		if _, err := mgr.Engine.Select(cfg.Networks); err != nil {
			// Not fatal: configs may appear later; pods fail with this error meanwhile.
			log.WithError(err).Warn("the configured networks are not available yet")
		}
	} else if len(names) == 0 && !oneShot {
		// networks: [] is the first config of confDir: none yet, pods
		// that ask for no network by name get none meanwhile.
		log.WithField("confDir", cfg.ConfDir).Warn("no valid CNI network config in confDir yet: pods get nri.conf's networks (the first config there) once one is added")
	}
	fields := logrus.Fields{"confDir": cfg.ConfDir, "binDirs": cfg.BinDirs, "loaded": names, "attach": cfg.Networks}
	if cfg.PluginRoot != "" {
		fields["pluginRoot"] = cfg.PluginRoot // plugins run chrooted into it
	}
	log.WithFields(fields).Info("CNI networks loaded")
	return mgr, nil
}

// checkPluginRoot refuses a pluginRoot when nri-cni does not see the host's
// PIDs: the plugins chrooted into it would read /proc paths naming other
// processes than the ones nri-cni and the runtime mean (hostroot.CheckPIDs).
// At every start and every reconfiguration (the pre-launched plugin's).
func checkPluginRoot(cfg config.Config) error {
	if err := hostroot.CheckPIDs(cfg.PluginRoot); err != nil {
		return fmt.Errorf("pluginRoot %s: %w; run nri-cni in the host's PID namespace (hostPID: true in the DaemonSet), or unset pluginRoot", cfg.PluginRoot, err)
	}
	return nil
}

// attachedNetworks counts the networks attached according to the records.
func attachedNetworks(mgr *attach.Manager) float64 {
	recs, _ := mgr.Records()
	n := 0
	for _, r := range recs {
		if r.Phase == state.PhaseAttached {
			n += len(r.Networks)
		}
	}
	return float64(n)
}

// startWatchers runs the daemon's background work: releasing sandboxes whose
// netns disappears, and reloading the CNI configs when confDir changes.
func startWatchers(ctx context.Context, mgr *attach.Built, log *logrus.Entry) error {
	if err := reconcile.WatchNetns(ctx, mgr.Manager, log, reconcile.DefaultSweep); err != nil {
		return err
	}
	cfg := mgr.Config()
	kick := make(chan struct{}, 1)
	onReload := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if err := reconcile.WatchConfigs(ctx, mgr.Engine, cfg.ConfDir, log, onReload); err != nil {
		// Not fatal: the configs loaded at start keep working.
		log.WithError(err).Warn("not watching the CNI config dir; changes need a restart")
	}
	if d := cfg.StatusInterval.D(); d > 0 {
		go reconcile.RunReadiness(ctx, mgr, log, d, kick)
	}
	if d := cfg.CheckInterval.D(); d > 0 {
		go reconcile.RunChecks(ctx, mgr, log, d)
	}
	return nil
}

// newLogger builds a logger at cfg's level writing to cfg.LogFile, else
// fallbackFile, else stderr.
func newLogger(cfg config.Config, stderr io.Writer, fallbackFile string) (*logrus.Logger, func(), error) {
	l := logrus.New()
	level, err := logrus.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, nil, err
	}
	l.SetLevel(level)
	l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	l.SetOutput(stderr)
	file := cfg.LogFile
	if file == "" {
		file = fallbackFile
	}
	if file == "" {
		return l, func() {}, nil
	}
	f, err := openLog(file)
	if err != nil {
		return nil, nil, err
	}
	l.SetOutput(f)
	return l, func() { _ = f.Close() }, nil
}
