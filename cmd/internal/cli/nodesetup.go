package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/nodeconf"
)

// nodeSetupCmd: `nri-cni node-setup --runtime containerd|crio [--root DIR]
// [--config FILE] [--check]` installs the runtime drop-in of deploy/node
// that turns on NRI's default validator (fail closed while nri-cni is away)
// and, for containerd, makes the main config import it; then it checks the
// result (nodeconf) and prints the report. --check only reports. Exit 0 when
// the node is set up, 1 when not (or on an error, which names the file).
//
// Idempotent: a second run writes nothing and says so. It never restarts
// the runtime; it says when a restart is needed.
func nodeSetupCmd(_ context.Context, a *app, args []string) int {
	flags := flag.NewFlagSet("node-setup", flag.ContinueOnError)
	flags.SetOutput(a.stderr)
	runtime := flags.String("runtime", "", "the node's runtime: containerd or crio (required)")
	root := flags.String("root", "/", "where the host's / is (from a container: where it is mounted)")
	mainConfig := flags.String("config", nodeconf.ContainerdConfig, "containerd's main config, a path on the host")
	checkOnly := flags.Bool("check", false, "only report; exit 1 when the node is not set up")
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
	if !path.IsAbs(*mainConfig) {
		return a.fail("node-setup: --config %q: give the main config's absolute path on the host", *mainConfig)
	}
	o := nodeconf.Options{Runtime: rt, Root: *root, ContainerdConfig: path.Clean(*mainConfig)}
	if !*checkOnly {
		changes, err := setUpNode(o)
		for _, c := range changes {
			fmt.Fprintln(a.stdout, c)
		}
		if err != nil {
			return a.fail("node-setup: %v", err)
		}
		if len(changes) == 0 {
			fmt.Fprintln(a.stdout, "nothing changed: nri-cni's drop-in and the import of it are already in place")
		} else {
			fmt.Fprintf(a.stdout, "restart %s to apply (node-setup never restarts it)\n", restartCommand(rt))
		}
	}
	r := nodeconf.Check(o)
	fmt.Fprint(a.stdout, r.String())
	if !r.OK() {
		return 1
	}
	return 0
}

func restartCommand(runtime string) string {
	if runtime == nodeconf.RuntimeCRIO {
		return "CRI-O (systemctl restart crio)"
	}
	return "containerd (systemctl restart containerd)"
}

// setUpNode writes the runtime's drop-in and, for containerd, the import of
// it; it returns one line per file changed.
func setUpNode(o nodeconf.Options) ([]string, error) {
	hostPath := func(p string) string { return filepath.Join(o.Root, p) }
	var changes []string
	write := func(p string, data []byte, how string) error {
		changed, err := writeIfChanged(hostPath(p), data)
		if changed {
			changes = append(changes, p+": "+how)
		}
		return err
	}
	if o.Runtime == nodeconf.RuntimeCRIO {
		return changes, write(nodeconf.CRIODropIn, node.CRIODropIn(), "written (nri-cni's CRI-O drop-in)")
	}
	if err := write(nodeconf.ContainerdDropIn, node.ContainerdDropIn(), "written (nri-cni's containerd drop-in)"); err != nil {
		return changes, err
	}
	main := o.ContainerdConfig
	data, err := os.ReadFile(hostPath(main))
	if errors.Is(err, fs.ErrNotExist) {
		err = write(main, nodeconf.MinimalContainerdConfig(),
			"written: there was none; it imports "+nodeconf.ContainerdImportGlob+" and keeps containerd's defaults otherwise")
		return changes, err
	}
	if err != nil {
		return changes, err
	}
	// Read through the whole import chain: the drop-in may be imported by a
	// file the main config imports.
	for _, f := range nodeconf.Check(o).Files {
		if f == nodeconf.ContainerdDropIn {
			return changes, nil
		}
	}
	out, change, err := nodeconf.EnsureImport(data, main, nodeconf.ContainerdDropIn)
	if err != nil || change == "" {
		return changes, err
	}
	return changes, write(main, out, change+" (the rest of the file is as it was)")
}

// writeIfChanged writes data to p atomically (a temporary file, then
// rename), unless p already holds exactly data. The temporary file is made
// beside p, or for a file in a drop-in dir (*.d) in the dir above it: CRI-O
// reads every file of crio.conf.d, so a crash must not leave one there. A file that
// exists keeps its mode; a new one is 0644, its directory created 0755. A
// symlink is not replaced (its target may be elsewhere, or outside the root):
// that is an error naming it.
func writeIfChanged(p string, data []byte) (bool, error) {
	old, err := os.ReadFile(p)
	if err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	mode := os.FileMode(0o644)
	if st, err := os.Lstat(p); err == nil {
		if st.Mode()&os.ModeSymlink != 0 {
			return false, fmt.Errorf("%s is a symlink: node-setup replaces regular files only; change its target yourself", p)
		}
		mode = st.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return false, err
	}
	tmpDir := filepath.Dir(p)
	if strings.HasSuffix(tmpDir, ".d") {
		tmpDir = filepath.Dir(tmpDir)
	}
	tmp, err := os.CreateTemp(tmpDir, "."+filepath.Base(p)+".*")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return false, err
	}
	return true, nil
}
