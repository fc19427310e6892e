package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/migrate"
)

// Cluster is read access to the API for migrate-check (kube.Reader).
type Cluster interface {
	// Inventory lists the pods of namespace ("" = all) and every NAD.
	Inventory(ctx context.Context, namespace string) (migrate.Inventory, error)
	// ConfigMapData gets a ConfigMap's data.
	ConfigMapData(ctx context.Context, namespace, name string) (map[string]string, error)
}

// ClusterOptions say how migrate-check reads the API.
type ClusterOptions struct {
	// Kubeconfig and Context may be empty: $KUBECONFIG, ~/.kube/config,
	// its current context, else in-cluster.
	Kubeconfig, Context string
	// ChunkSize is the items per list request (0: 500).
	ChunkSize int64
}

// ClusterReader connects to the API server. Only nri-cni-k8s links one.
type ClusterReader func(o ClusterOptions) (Cluster, error)

// exitDiffers is migrate-check's status when a pod would not get what
// Multus gives it, or kubernetes.nadPolicy refuses a NAD: distinct from 1
// (the check could not run) and 2 (usage), so a CI gate can tell "not safe
// yet" from "broken".
const exitDiffers = 3

// migrateCheckCmd: `nri-cni-k8s migrate-check`: for every pod with the NPWG
// annotation, what nri-cni would do with this nri.conf, and whether that is
// Multus's outcome (migrate.Check).
func migrateCheckCmd(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("migrate-check", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	cfgPath := fs.String("config", config.DefaultConfigPath, "nri.conf to judge with")
	fromCM := fs.String("from-configmap", "", "read nri.conf and its networks from this ConfigMap (NAMESPACE/NAME, e.g. kube-system/nri-cni) instead of --config")
	confDir := fs.String("conf-dir", "", "read the confDir networks (what a NAD with an empty spec.config means) from this directory (default: the ConfigMap's networks, or the config's confDir)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
	kubeContext := fs.String("context", "", "kubeconfig context (default: its current one)")
	var namespace, output string
	fs.StringVar(&namespace, "namespace", "", "check the pods of this namespace only (NADs are read from every namespace)")
	fs.StringVar(&namespace, "n", "", "short for --namespace")
	fs.StringVar(&output, "output", "table", "table or json")
	fs.StringVar(&output, "o", "table", "short for --output")
	chunk := fs.Int64("chunk-size", 500, "list pods and NADs in pages of this many (limit/continue)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		return a.fail("migrate-check: unexpected arguments %q", fs.Args())
	}
	if output != "table" && output != "json" {
		return a.fail("migrate-check: -o %q: want table or json", output)
	}
	if *chunk < 1 {
		return a.fail("migrate-check: --chunk-size %d: want at least 1", *chunk)
	}
	if a.cluster == nil {
		return a.fail("migrate-check reads the Kubernetes API, and this build of nri-cni links no API client: run nri-cni-k8s migrate-check")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cluster, err := a.cluster(ClusterOptions{Kubeconfig: *kubeconfig, Context: *kubeContext, ChunkSize: *chunk})
	if err != nil {
		return a.fail("migrate-check: %v", err)
	}
	cfg, cmNetworks, err := checkConfig(ctx, a, cluster, *cfgPath, *fromCM)
	if err != nil {
		return a.fail("migrate-check: %v", err)
	}
	local, err := checkNetworks(ctx, a, cfg, cmNetworks, *fromCM, *confDir)
	if err != nil {
		return a.fail("migrate-check: %v", err)
	}
	inv, err := cluster.Inventory(ctx, namespace)
	if err != nil {
		return a.fail("migrate-check: %v", err)
	}
	rep, err := migrate.Check(ctx, migrate.Input{Config: cfg, Local: local, Inventory: inv, Namespace: namespace})
	if err != nil {
		return a.fail("migrate-check: %v", err)
	}
	if output == "json" {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteTable(a.stdout)
	}
	if err != nil {
		return a.fail("migrate-check: %v", err)
	}
	// A refused NAD fails every pod that names it later (a CronJob's, a
	// Deployment scaled to zero) and cannot be written in deny mode.
	if !rep.OK() || len(rep.NADs.Refused) > 0 {
		return exitDiffers
	}
	return 0
}

// checkConfig reads nri.conf from the file at path or, with configMap
// (NAMESPACE/NAME), from the ConfigMap's nri.conf key; then it also returns
// the ConfigMap's other keys (its networks, as the DaemonSet mounts them).
func checkConfig(ctx context.Context, a *app, c Cluster, path, configMap string) (config.Config, map[string]string, error) {
	if configMap == "" {
		cfg, err := config.Load(path)
		return cfg, nil, err
	}
	ns, name, ok := strings.Cut(configMap, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return config.Config{}, nil, fmt.Errorf("--from-configmap %q: want NAMESPACE/NAME", configMap)
	}
	data, err := c.ConfigMapData(ctx, ns, name)
	if err != nil {
		return config.Config{}, nil, err
	}
	conf, ok := data[nriConfKey]
	if !ok {
		return config.Config{}, nil, fmt.Errorf("ConfigMap %s: %w", configMap, errNotAConfigMap)
	}
	cfg, err := config.Parse([]byte(conf))
	if err != nil {
		return config.Config{}, nil, fmt.Errorf("ConfigMap %s: %s: %w", configMap, nriConfKey, err)
	}
	delete(data, nriConfKey)
	return cfg, data, nil
}

// checkNetworks loads the confDir networks as nri-cni loads its confDir
// (cni.LoadDir), parsed only: the plugin binaries are the nodes'. They come
// from dir if set, else from the ConfigMap's keys (written to a temporary
// directory, so the loader is the node's), else from the config's confDir.
// A confDir that is not there is a warning: NADs with an empty spec.config
// then name no network.
func checkNetworks(ctx context.Context, a *app, cfg config.Config, cmNetworks map[string]string, configMap, dir string) ([]*cni.Network, error) {
	where := func(err error) string { return err.Error() }
	if dir == "" && configMap != "" {
		tmp, err := os.MkdirTemp("", "nri-cni-migrate-check-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		for _, key := range slices.Sorted(maps.Keys(cmNetworks)) {
			if filepath.Base(key) != key || !slices.Contains(cni.Extensions, filepath.Ext(key)) {
				continue // not a CNI config file name
			}
			if err := os.WriteFile(filepath.Join(tmp, key), []byte(cmNetworks[key]), 0o600); err != nil {
				return nil, err
			}
		}
		dir = tmp
		where = func(err error) string {
			return strings.ReplaceAll(err.Error(), tmp+string(filepath.Separator), "ConfigMap "+configMap+" key ")
		}
	} else if dir == "" {
		dir = cfg.ConfDir
	}
	nets, skipped, err := cni.LoadDir(ctx, nil, dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(a.stderr, "nri-cni: migrate-check: %v: NADs with an empty spec.config are judged as naming no network (use --conf-dir or --from-configmap)\n", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range skipped {
		fmt.Fprintf(a.stderr, "nri-cni: migrate-check: skipping %s\n", where(e))
	}
	return nets, nil
}
