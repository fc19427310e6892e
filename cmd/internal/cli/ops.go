package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// statusCmd: `nri-cni status [--config FILE] [--json]`: every attachment
// on record, one row per network.
func statusCmd(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	cfgPath := fs.String("config", config.DefaultConfigPath, "nri-cni config file")
	asJSON := fs.Bool("json", false, "print JSON")
	networksOnly := fs.Bool("networks", false, "print each network's readiness (CNI STATUS) only")
	draOnly := fs.Bool("dra", false, "print the DRA driver's report of the kubelet's DRA checkpoint only")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return a.fail("status: %v", err)
	}
	if *networksOnly {
		return networkStatus(ctx, a, cfg, *asJSON)
	}
	if *draOnly {
		return draStatus(a, cfg.StateDir, *asJSON)
	}
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return a.fail("status: %v", err)
	}
	recs, errs := store.List()
	for _, e := range errs {
		fmt.Fprintf(a.stderr, "nri-cni: status: skipping %v\n", e)
	}
	type row struct {
		Pod       string    `json:"pod"`
		Namespace string    `json:"namespace"`
		Sandbox   string    `json:"sandbox"`
		Kind      string    `json:"kind"`
		Phase     string    `json:"phase"`
		Netns     string    `json:"netns"`
		Network   string    `json:"network"`
		IfName    string    `json:"ifname"`
		IPs       []string  `json:"ips"`
		Created   time.Time `json:"created"`
		// PolicyDigest: the MultiNetworkPolicy table programmed in the
		// pod's netns; Quarantined: the interface is down until it is
		// programmed again.
		PolicyDigest string `json:"policyDigest,omitempty"`
		Quarantined  bool   `json:"quarantined,omitempty"`
	}
	rows := []row{}
	for _, r := range recs {
		for _, n := range r.Networks {
			rw := row{Pod: r.Name, Namespace: r.Namespace, Sandbox: r.ID, Kind: r.Kind, Phase: string(r.Phase),
				Netns: r.Netns, Network: n.Name, IfName: n.IfName, IPs: n.IPs, Created: r.Created}
			if r.Policy != nil {
				rw.PolicyDigest, rw.Quarantined = r.Policy.Digest, slices.Contains(r.Policy.Quarantined, n.IfName)
			}
			rows = append(rows, rw)
		}
	}
	if *asJSON {
		warnDRACheckpoint(a.stderr, cfg.StateDir) // the rows stay a list
		return a.printJSON(rows)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tSANDBOX\tPHASE\tNETWORK\tIFNAME\tIPS\tAGE\tNETNS")
	for _, r := range rows {
		id := r.Sandbox
		if len(id) > 13 {
			id = id[:13]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Pod, id, r.Phase, r.Network, r.IfName,
			strings.Join(r.IPs, ","), time.Since(r.Created).Round(time.Second), r.Netns)
	}
	_ = tw.Flush()
	fmt.Fprintln(a.stdout)
	printNodeCheck(a.stdout, cfg.StateDir)
	fmt.Fprintln(a.stdout)
	if printDRACheckpoint(a.stdout, cfg.StateDir) {
		fmt.Fprintln(a.stdout)
	}
	if code := networkStatus(ctx, a, cfg, false); code != 0 {
		fmt.Fprintln(a.stderr, "nri-cni: status: network readiness unknown (see above); the attachments are listed")
	}
	return 0
}

// printJSON prints v indented, for `status --json`.
func (a *app) printJSON(v any) int {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return a.fail("status: %v", err)
	}
	return 0
}

// networkStatus asks every network in confDir for STATUS now (as the running
// plugin does every statusInterval) and prints the answers.
func networkStatus(ctx context.Context, a *app, cfg config.Config, asJSON bool) int {
	engine := cni.New(cni.Options{ConfDir: cfg.ConfDir, BinDirs: cfg.BinDirs, CacheDir: cfg.CacheDir, PluginRoot: cfg.PluginRoot})
	skipped, err := engine.Reload(ctx)
	if err != nil {
		return a.fail("status: %v", err)
	}
	for _, e := range skipped {
		fmt.Fprintf(a.stderr, "nri-cni: status: skipping %v\n", e)
	}
	type row struct {
		Network string `json:"network"`
		Ready   bool   `json:"ready"`
		Reason  string `json:"reason,omitempty"`
	}
	rows := []row{}
	for _, n := range engine.Networks() {
		cctx, cancel := context.WithTimeout(ctx, cfg.CNITimeout.D())
		err := engine.Status(cctx, n)
		cancel()
		r := row{Network: n.Name, Ready: err == nil}
		if err != nil {
			r.Reason = err.Error()
		}
		rows = append(rows, r)
	}
	if asJSON {
		return a.printJSON(rows)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NETWORK\tREADY\tREASON (CNI STATUS)")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%t\t%s\n", r.Network, r.Ready, r.Reason)
	}
	_ = tw.Flush()
	return 0
}

// healthzCmd: exit 0 iff the running plugin's /healthz (or, --ready, its
// /readyz) answers 200: exec liveness and readiness probes (the image has no
// shell or curl).
func healthzCmd(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("healthz", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	addr := fs.String("addr", "127.0.0.1:9734", "the plugin's --metrics-addr")
	ready := fs.Bool("ready", false, "ask /readyz (serving: connected and synchronized) instead of /healthz (connected)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	path, name := "/healthz", "healthz"
	if *ready {
		path, name = "/readyz", "readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+*addr+path, nil)
	if err != nil {
		return a.fail("healthz: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return a.fail("%s: %v", name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return a.fail("%s: %s: %s", name, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprint(a.stdout, string(body))
	return 0
}

// installPluginsCmd: `nri-cni install-plugins [--replace] --from DIR --to DIR
// NAME...` copies each CNI plugin binary that is absent in --to (the
// DaemonSet's init container; the node's own plugins are never replaced).
// --replace copies every one, atomically (nri-cni's own binary for the
// await hook, renewed at every upgrade).
func installPluginsCmd(_ context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("install-plugins", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	from := fs.String("from", "/opt/nri-cni/cni-bin", "directory holding the plugins")
	to := fs.String("to", "/host/opt/cni/bin", "the node's CNI bin dir")
	replace := fs.Bool("replace", false, "replace files that are there (atomically)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		return a.fail("install-plugins: name at least one plugin")
	}
	if err := os.MkdirAll(*to, 0o755); err != nil {
		return a.fail("install-plugins: %v", err)
	}
	for _, name := range fs.Args() {
		if name != filepath.Base(name) || name == "." || name == ".." {
			return a.fail("install-plugins: %q is not a plugin name", name)
		}
		dst := filepath.Join(*to, name)
		if _, err := os.Stat(dst); err == nil && !*replace {
			fmt.Fprintf(a.stdout, "%s: present, kept\n", dst)
			continue
		}
		if err := copyExecutable(filepath.Join(*from, name), dst); err != nil {
			return a.fail("install-plugins: %v", err)
		}
		fmt.Fprintf(a.stdout, "%s: installed\n", dst)
	}
	return 0
}

// copyExecutable copies src to dst atomically (temp file + rename), 0755.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
