package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/hook/oci"
	"github.com/nri-cni/nri-cni/reconcile"
)

// hookCmd: `nri-cni hook [--config FILE] [STAGE]`, run by the container
// runtime with the OCI state on stdin. A failure is one line on stderr
// (runtimes show it to the user) and exit status 1.
func hookCmd(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("hook", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	cfgPath := fs.String("config", config.DefaultConfigPath, "nri-cni config file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 1 {
		return a.fail("hook: want at most one stage argument (createRuntime, prestart, poststop or auto), got %q", fs.Args())
	}
	stage := fs.Arg(0) // "" = auto: from the state's status
	what := strings.TrimSpace("hook " + stage)
	// A hook lives for one ADD or DEL: collecting garbage only slows it.
	debug.SetGCPercent(-1)
	log, closeLog, mgr, unlock, err := setupOffline(ctx, a, *cfgPath, false)
	if err != nil {
		return a.fail("%s: %v", what, err)
	}
	defer closeLog()
	defer unlock()
	h := &oci.OCIHook{Mgr: mgr, Hook: mgr.Config().Hook, Stdin: a.stdin, Log: log}
	if err := h.Run(ctx, stage); err != nil {
		return a.fail("%s: %v", what, err)
	}
	return 0
}

// gcCmd: `nri-cni gc [--config FILE]`: tear down records whose sandbox is
// gone and GC libcni's cache (the clean-up path for hook mode).
func gcCmd(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	cfgPath := fs.String("config", config.DefaultConfigPath, "nri-cni config file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, closeLog, mgr, unlock, err := setupOffline(ctx, a, *cfgPath, true)
	if err != nil {
		return a.fail("gc: %v", err)
	}
	defer closeLog()
	defer unlock()
	res := reconcile.GC(ctx, mgr, nil)
	for _, err := range res.Strays {
		log.WithError(err).Warn("gc: skipping a record file that names no sandbox")
	}
	fmt.Fprintf(a.stdout, "gc: %d kept, %d stale torn down, %d stale cache entries removed\n", res.Kept, res.TornDown, res.StaleCached)
	if err := res.Err(); err != nil {
		log.WithError(err).Error("gc incomplete")
		return a.fail("gc: %v", err)
	}
	return 0
}

// setupOffline builds a Manager for a one-shot command and takes the state
// dir's process lock (exclusive for GC). Logs go to logFile, else nowhere.
func setupOffline(ctx context.Context, a *app, cfgPath string, exclusive bool) (*logrus.Entry, func(), *attach.Manager, func(), error) {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	logger, closeLog, err := newLogger(cfg, io.Discard, "")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	log := logrus.NewEntry(logger)
	built, err := buildManager(ctx, cfg, log, true, attach.Deps{})
	if err != nil {
		closeLog()
		return nil, nil, nil, nil, err
	}
	unlock, err := built.Store.ProcessLock(exclusive)
	if err != nil {
		closeLog()
		return nil, nil, nil, nil, err
	}
	return log, closeLog, built.Manager, unlock, nil
}
