package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
)

// nadPolicyCmd: `nri-cni nad-policy [--config FILE | --configmap FILE]
// [--mode warn|audit|deny] [--namespace-selector SEL] [--object-selector SEL]`:
// print the ValidatingAdmissionPolicy and binding that judge at kubectl
// apply the NetworkAttachmentDefinitions the config's kubernetes.nadPolicy
// refuses on the node, warning (the default) or refusing. Admins regenerate
// it after every policy change. The binding's mode and scope are flags, not
// nri.conf keys: changing them must not restart nri-cni on every node.
func nadPolicyCmd(_ context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("nad-policy", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	cfgPath := fs.String("config", config.DefaultConfigPath, "nri-cni config file (nri.conf)")
	cmPath := fs.String("configmap", "", "a ConfigMap manifest whose "+nriConfKey+" key is the config (instead of --config)")
	mode := fs.String("mode", string(nadpolicy.DefaultMode), "what the binding does with a NAD the policy refuses: "+
		"warn (admit it, warn the client, record it in the audit log), audit (admit it, record it) or deny (refuse it)")
	nsSel := fs.String("namespace-selector", "", "bind only NADs of namespaces whose labels match this selector "+
		"(kubectl -l syntax, e.g. 'kubernetes.io/metadata.name notin (multus-nets)'; default: every namespace)")
	objSel := fs.String("object-selector", "", "bind only NADs whose labels match this selector (kubectl -l syntax; default: every NAD)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		return a.fail("nad-policy: unexpected arguments %q", fs.Args())
	}
	var cfg config.Config
	var err error
	if *cmPath != "" {
		cfg, err = configFromConfigMap(*cmPath)
	} else {
		cfg, err = config.Load(*cfgPath)
	}
	if err != nil {
		return a.fail("nad-policy: %v", err)
	}
	if cfg.Kubernetes == nil {
		fmt.Fprintln(a.stderr, "nri-cni: nad-policy: the config has no kubernetes section (no NADs are read): printing the code default's policy")
	}
	out, err := nadpolicy.AdmissionPolicy(cfg.Kubernetes.NADPolicyOrDefault(), cfg.Kubernetes.NADConfigLimit(),
		nadpolicy.WithMode(nadpolicy.Mode(*mode)), nadpolicy.WithNamespaceSelector(*nsSel), nadpolicy.WithObjectSelector(*objSel))
	if err != nil {
		return a.fail("nad-policy: %v", err)
	}
	if _, err := a.stdout.Write(out); err != nil {
		return a.fail("nad-policy: %v", err)
	}
	return 0
}

// nriConfKey is the ConfigMap key deploy/base and the chart keep nri.conf in.
const nriConfKey = "nri.conf"

func configFromConfigMap(path string) (config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return config.Config{}, err
	}
	var cm struct {
		Kind string            `json:"kind"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		return config.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	conf, ok := cm.Data[nriConfKey]
	if cm.Kind != "ConfigMap" || !ok {
		return config.Config{}, fmt.Errorf("%s: %w", path, errNotAConfigMap)
	}
	cfg, err := config.Parse([]byte(conf))
	if err != nil {
		return config.Config{}, fmt.Errorf("%s: %s: %w", path, nriConfKey, err)
	}
	return cfg, nil
}

var errNotAConfigMap = errors.New("not a ConfigMap with a " + nriConfKey + " key")
