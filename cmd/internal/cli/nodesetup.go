package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"time"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/nodeconf"
)

// Exit codes of node-setup beyond 0 (fail-closed) and 1 (not set up, or an
// error naming the file).
const (
	// exitRestartPending: --check found the files set up but changed after
	// the running runtime started.
	exitRestartPending = 3
)

// nodeSetupCmd: `nri-cni node-setup --runtime containerd|crio [--root DIR]
// [--config FILE] [--config-dir DIR] [--force] [--check]` installs the
// runtime drop-in of deploy/node that turns on NRI's default validator
// (fail closed while nri-cni is away) and, for containerd, makes the main
// config import it; then it checks the result (nodeconf), judges whether
// the running runtime loaded it (its process's start against the files'
// changes) and prints the report. --check only reports.
//
// Exit: 0 when the files are set up (with --check: and the running runtime
// loaded them, or none runs), 1 when they are not (or on an error, which
// names the file), 3 with --check when a restart is pending.
//
// Idempotent: a second run writes nothing and says so. It keeps a backup of
// every file it changes, outside the runtime's drop-in dirs, and refuses to
// replace a drop-in edited since node-setup wrote it unless --force. It
// never restarts the runtime; it says when a restart is needed.
func nodeSetupCmd(ctx context.Context, a *app, args []string) int {
	flags := flag.NewFlagSet("node-setup", flag.ContinueOnError)
	flags.SetOutput(a.stderr)
	runtime := flags.String("runtime", "", "the node's runtime: containerd or crio (required)")
	root := flags.String("root", "/", "where the host's / is (from a container: where it is mounted)")
	mainConfig := flags.String("config", "", "the runtime's main config, a path on the host (default "+
		nodeconf.ContainerdConfig+" or "+nodeconf.CRIOConfig+")")
	dropInDir := flags.String("config-dir", "", "CRI-O's drop-in dir, a path on the host (default "+nodeconf.CRIODropInDir+")")
	checkOnly := flags.Bool("check", false, "only report; exit 1 when the node is not set up, 3 when the runtime needs a restart")
	force := flags.Bool("force", false, "replace nri-cni's drop-in even if it was edited since node-setup wrote it (a backup is kept)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() > 0 {
		return a.fail("node-setup: unexpected arguments %q", flags.Args())
	}
	rt := nodeconf.NormalizeRuntime(*runtime)
	if rt != nodeconf.RuntimeContainerd && rt != nodeconf.RuntimeCRIO {
		fmt.Fprintf(a.stderr, "nri-cni: node-setup: --runtime containerd or --runtime crio (got %q)\n", *runtime)
		return 2
	}
	o := nodeconf.Options{Runtime: rt, Root: *root}
	for flag, p := range map[string]string{"--config": *mainConfig, "--config-dir": *dropInDir} {
		if p != "" && !path.IsAbs(p) {
			return a.fail("node-setup: %s %q: give the absolute path on the host", flag, p)
		}
	}
	switch {
	case rt == nodeconf.RuntimeContainerd && *dropInDir != "":
		return a.fail("node-setup: --config-dir is CRI-O's; containerd's drop-in is %s, imported by its main config", nodeconf.ContainerdDropIn)
	case rt == nodeconf.RuntimeContainerd:
		o.ContainerdConfig = nodeconf.ContainerdConfig
		if *mainConfig != "" {
			o.ContainerdConfig = path.Clean(*mainConfig)
		}
	default:
		o.CRIOConfig, o.CRIODropInDir = nodeconf.CRIOConfig, nodeconf.CRIODropInDir
		if *mainConfig != "" {
			o.CRIOConfig = path.Clean(*mainConfig)
		}
		if *dropInDir != "" {
			o.CRIODropInDir = path.Clean(*dropInDir)
		}
	}
	if !*checkOnly {
		w := &nodeWriter{root: o.Root, force: *force, now: time.Now().UTC(), syncDir: syncDir}
		err := setUpNode(w, o)
		for _, c := range w.changes {
			fmt.Fprintln(a.stdout, c)
		}
		if err != nil {
			return a.fail("node-setup: %v", err)
		}
		if len(w.changes) == 0 {
			fmt.Fprintln(a.stdout, "nothing changed: nri-cni's drop-in and the import of it are already in place")
		} else {
			fmt.Fprintf(a.stdout, "restart %s to apply (node-setup never restarts it)\n", nodeconf.RestartCommand(rt))
		}
	}
	r := checkRunning(ctx, o)
	fmt.Fprint(a.stdout, r.String())
	switch {
	case !r.OK():
		return 1
	case *checkOnly && r.State() == nodeconf.StateRestartPending:
		return exitRestartPending
	}
	return 0
}

// checkRunning checks the runtime's files and, when they are set up,
// whether the runtime serving the socket they name loaded them.
func checkRunning(ctx context.Context, o nodeconf.Options) nodeconf.Report {
	r := nodeconf.Check(o)
	if r.OK() {
		r.Judge(o, nodeconf.RuntimeAt(ctx, o.Root, r.Socket))
	}
	return r
}

// setUpNode writes the runtime's drop-in and, for containerd, the import of
// it (w records what changed).
func setUpNode(w *nodeWriter, o nodeconf.Options) error {
	if o.Runtime == nodeconf.RuntimeCRIO {
		return w.dropIn(path.Join(o.CRIODropInDir, node.CRIODropInName), node.CRIODropIn(), "nri-cni's CRI-O drop-in")
	}
	if err := w.dropIn(nodeconf.ContainerdDropIn, node.ContainerdDropIn(), "nri-cni's containerd drop-in"); err != nil {
		return err
	}
	main := o.ContainerdConfig
	p, err := nodeconf.HostPath(o.Root, main)
	if err != nil {
		return fmt.Errorf("%s: %w", main, err)
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return w.write(main, nodeconf.MinimalContainerdConfig(), "", "written: there was none; it imports "+nodeconf.ContainerdDropIn+
			" and keeps containerd's defaults otherwise")
	}
	if err != nil {
		return err
	}
	// Read through the whole import chain: the drop-in may be imported by a
	// file the main config imports.
	for _, f := range nodeconf.Check(o).Files {
		if f == nodeconf.ContainerdDropIn {
			return nil
		}
	}
	out, change, err := nodeconf.EnsureImport(data, main, nodeconf.ContainerdDropIn)
	if err != nil || change == "" {
		return err
	}
	return w.write(main, out, "", change+" (the rest of the file is as it was)")
}
