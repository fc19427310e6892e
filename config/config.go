// Package config loads and validates the nri-cni configuration (nri.conf).
//
// The file is YAML or JSON. Unknown keys and bad values are errors that name
// the key, so a typo never silently falls back to a default.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"sigs.k8s.io/yaml"
)

// Defaults. DefaultConfDir is deliberately not containerd's /etc/cni/net.d,
// which holds the runtime's primary network.
const (
	DefaultConfigPath   = "/etc/nri-cni/nri.conf"
	DefaultConfDir      = "/etc/nri-cni/net.d"
	DefaultBinDir       = "/opt/cni/bin"
	DefaultCacheDir     = "/var/lib/cni"
	DefaultStateDir     = "/var/lib/nri-cni"
	DefaultIfnamePrefix = "net"
	DefaultCNITimeout   = 1500 * time.Millisecond
	// DefaultStatusInterval: CNI STATUS of every network twice a minute.
	DefaultStatusInterval = 30 * time.Second
	DefaultLogLevel       = "info"
	// DefaultPrelaunchedLogFile is where a plugin started by the runtime logs:
	// containerd discards a pre-launched plugin's stdout and stderr.
	DefaultPrelaunchedLogFile = "/var/log/nri-cni.log"

	maxCNITimeout = 10 * time.Minute
	// maxIfnameLen is IFNAMSIZ-1; the prefix leaves room for a 2-digit index.
	maxIfnameLen       = 15
	maxIfnamePrefixLen = maxIfnameLen - 2
	// maxNetworks keeps <prefix><index> within maxIfnameLen.
	maxNetworks = 99
)

// Config is the nri-cni configuration. The JSON names are the file's keys.
type Config struct {
	// ConfDir holds the CNI network configs (.conf, .conflist, .json) that
	// nri-cni attaches.
	ConfDir string `json:"confDir"`
	// BinDirs are searched for CNI plugin binaries, in order. With
	// PluginRoot they are paths inside it (the host's paths).
	BinDirs []string `json:"binDirs"`
	// PluginRoot is where the host's root directory is seen ("" or "/":
	// nri-cni runs on the host, or plugins run in its own root). When set,
	// every CNI plugin runs chrooted into it, so it finds the host's tools
	// (iptables, the dhcp daemon's socket, ovs-vsctl) as under the runtime;
	// binDirs, CNI_PATH and the netns path are host paths (cni/pluginroot.go).
	// Every host path nri-cni opens under it is resolved inside it (package
	// hostroot: /var/run -> /run leads to <root>/run). It needs nri-cni in
	// the host's PID namespace (hostPID), which every command checks at
	// start. The DaemonSet mounts the host's / at /host and sets it.
	PluginRoot string `json:"pluginRoot"`
	// CacheDir is libcni's cache (results and configs of every ADD).
	CacheDir string `json:"cacheDir"`
	// StateDir holds nri-cni's attachment records.
	StateDir string `json:"stateDir"`
	// Networks names the networks to attach, in order. Empty means the first
	// valid config in ConfDir (the kubelet's rule).
	Networks []string `json:"networks"`
	// DefaultNetworks are attached to every pod nri-cni serves, before the
	// networks it asks for (or Networks): Multus's defaultNetworks. Each is
	// a confDir network's name or a NetworkAttachmentDefinition's
	// "namespace/name" (Kubernetes mode) (defaultnetworks.go).
	DefaultNetworks []string `json:"defaultNetworks"`
	// DefaultNetworksExclude lists namespaces whose pods do not get
	// DefaultNetworks (Multus's systemNamespaces); they still get the
	// networks they ask for.
	DefaultNetworksExclude []string `json:"defaultNetworksExclude"`
	// IfnamePrefix names interfaces: the i-th network gets <prefix><i>.
	IfnamePrefix string `json:"ifnamePrefix"`
	// CNITimeout bounds every CNI call (further capped by the runtime's
	// request deadline).
	CNITimeout Duration `json:"cniTimeout"`
	// LogLevel is a logrus level: trace, debug, info, warn, error.
	LogLevel string `json:"logLevel"`
	// LogFile is where logs go; empty means stderr, except for a plugin
	// pre-launched by the runtime, which defaults to DefaultPrelaunchedLogFile,
	// and for `nri-cni hook`, which then logs nothing (its stderr is for the
	// one error line the runtime shows).
	LogFile string `json:"logFile"`
	// FailurePolicy says what a failed attach does to the pod: "fail" (the
	// pod fails cleanly) or "ignore" (it starts without the networks; the
	// failure is logged as an error with the pod).
	FailurePolicy string `json:"failurePolicy"`
	// SyncAttach: on (re)connecting, attach pods created while nri-cni was
	// away, if their network namespace exists.
	SyncAttach bool `json:"syncAttach"`
	// ParallelAttach: the networks of one pod are ADDed concurrently (and
	// DELed concurrently). The CNI spec asks runtimes not to run operations
	// on one container in parallel, so this is for chains known to be safe
	// (docs/configuration.md).
	ParallelAttach bool `json:"parallelAttach"`
	// BackgroundAttach (NRI plugin): RunPodSandbox starts the pod's attach
	// and answers at once; the pod's first container waits for it at NRI
	// CreateContainer. The runtime serialises its NRI calls node-wide, so
	// the CNI chains of a pod storm then run side by side instead of one
	// after the other under the runtime's lock (docs/configuration.md).
	BackgroundAttach bool `json:"backgroundAttach"`
	// StatusInterval: how often every network's plugins are asked for
	// readiness (CNI STATUS), besides on load and on config change; 0 turns
	// STATUS off. A network not ready fails the pods that need it at once.
	StatusInterval Duration `json:"statusInterval"`
	// CheckInterval: how often every attachment is CHECKed (CNI CHECK) for
	// drift; 0 (the default) turns it off. Failures are reported, not
	// repaired.
	CheckInterval Duration `json:"checkInterval"`
	// PodSelection lets a pod pick networks (and interface names) with the
	// annotation nri-cni.io/networks; an empty value opts the pod out.
	PodSelection bool `json:"podSelection"`
	// RequireAnnotation (with PodSelection): a pod without the networks
	// annotation gets no networks at all — opt-in, as Kubernetes users know
	// it from Multus. Without it, such a pod gets the configured networks.
	RequireAnnotation bool `json:"requireAnnotation"`
	// Namespaces limits which pods' namespaces get networks.
	Namespaces NamespaceFilter `json:"namespaces"`
	// PodCapabilities lists the CNI capabilities pods may ask for with
	// annotations (CapabilityBandwidth, CapabilityMAC, CapabilityIPs,
	// CapabilityPortMappings). A pod that sets the annotation of a capability
	// not listed fails. Default: bandwidth only.
	PodCapabilities []string `json:"podCapabilities"`
	// PodCNIArgs lists the keys a pod may pass to the plugins' args.cni with
	// an NPWG selection element's "cni-args". Empty (the default): cni-args
	// are refused. Keys that mean a capability (CNIArgCapabilities: ips,
	// mac, sysctl) also need it in PodCapabilities.
	PodCNIArgs []string `json:"podCNIArgs"`
	// Hook configures OCI hook mode.
	Hook HookConfig `json:"hook"`
	// Limits bound the work one pod's annotations can cause (limits.go).
	Limits Limits `json:"limits"`
	// FailClosed: the node's part in never starting a pod's containers
	// before its networks (failclosed.go).
	FailClosed FailClosedConfig `json:"failClosed"`
	// Kubernetes, when set, turns on Kubernetes mode (kubernetes.go): nil
	// means no API client at all.
	Kubernetes *KubernetesConfig `json:"kubernetes"`
}

// NamespaceFilter: an empty Include means every namespace; Exclude wins.
type NamespaceFilter struct {
	Include []string `json:"include"`
	Exclude []string `json:"exclude"`
}

// Allows reports whether pods of namespace ns get networks.
func (f NamespaceFilter) Allows(ns string) bool {
	for _, x := range f.Exclude {
		if x == ns {
			return false
		}
	}
	if len(f.Include) == 0 {
		return true
	}
	for _, x := range f.Include {
		if x == ns {
			return true
		}
	}
	return false
}

// Failure policies.
const (
	FailurePolicyFail   = "fail"
	FailurePolicyIgnore = "ignore"
)

// HookConfig says where OCI hook mode finds a container's pod identity: the
// first annotation present in each list wins.
type HookConfig struct {
	PodNameAnnotations      []string `json:"podNameAnnotations"`
	PodNamespaceAnnotations []string `json:"podNamespaceAnnotations"`
	PodUIDAnnotations       []string `json:"podUIDAnnotations"`
	SandboxIDAnnotations    []string `json:"sandboxIDAnnotations"`
}

// DefaultHookConfig knows containerd's CRI and CRI-O's annotations.
func DefaultHookConfig() HookConfig {
	return HookConfig{
		PodNameAnnotations:      []string{"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"},
		PodNamespaceAnnotations: []string{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"},
		PodUIDAnnotations:       []string{"io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"},
		SandboxIDAnnotations:    []string{"io.kubernetes.cri.sandbox-id", "io.kubernetes.cri-o.SandboxID"},
	}
}

// Default returns the configuration used when no file sets a key.
func Default() Config {
	return Config{
		ConfDir:         DefaultConfDir,
		BinDirs:         []string{DefaultBinDir},
		CacheDir:        DefaultCacheDir,
		StateDir:        DefaultStateDir,
		IfnamePrefix:    DefaultIfnamePrefix,
		CNITimeout:      Duration(DefaultCNITimeout),
		LogLevel:        DefaultLogLevel,
		FailurePolicy:   FailurePolicyFail,
		SyncAttach:      true,
		StatusInterval:  Duration(DefaultStatusInterval),
		PodCapabilities: DefaultPodCapabilities(),
		Hook:            DefaultHookConfig(),
		Limits:          DefaultLimits(),
		FailClosed:      DefaultFailClosed(),
	}
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid configuration")

// Load reads and validates the configuration file at path.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes YAML or JSON over the defaults and validates the result.
// Empty input yields the defaults.
func Parse(data []byte) (Config, error) {
	cfg := Default()
	if err := checkKeys(data, &cfg); err != nil {
		return Config{}, err
	}
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalid, keyed(err, data))
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

var (
	// ifnameRe: what the kernel and CNI accept in an interface name prefix.
	ifnameRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)
	// networkNameRe follows the CNI spec's rule for network names.
	networkNameRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)
)

// validNamespace: a DNS-1123 label, as Kubernetes namespaces are.
// networkNames checks a list of CNI network names at key (its entries
// named key[i]): each a valid name, none twice.
func networkNames(key string, names []string) error {
	seen := map[string]bool{}
	for i, n := range names {
		at := fmt.Sprintf("%s[%d]", key, i)
		if !networkNameRe.MatchString(n) {
			return fmt.Errorf("%w: %s: %q is not a valid CNI network name", ErrInvalid, at, n)
		}
		if seen[n] {
			return fmt.Errorf("%w: %s: network %q listed twice", ErrInvalid, at, n)
		}
		seen[n] = true
	}
	return nil
}

func validNamespace(ns string) bool {
	if len(ns) == 0 || len(ns) > 63 || ns[0] == '-' || ns[len(ns)-1] == '-' {
		return false
	}
	for i := 0; i < len(ns); i++ {
		if c := ns[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Validate checks every key and names the first bad one.
func (c *Config) Validate() error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
	}
	for _, kv := range [][2]string{{"confDir", c.ConfDir}, {"cacheDir", c.CacheDir}, {"stateDir", c.StateDir}} {
		if kv[1] == "" || !filepath.IsAbs(kv[1]) {
			return bad(kv[0], "must be an absolute path, got %q", kv[1])
		}
	}
	if len(c.BinDirs) == 0 {
		return bad("binDirs", "must list at least one directory")
	}
	for i, d := range c.BinDirs {
		if !filepath.IsAbs(d) {
			return bad(fmt.Sprintf("binDirs[%d]", i), "must be an absolute path, got %q", d)
		}
	}
	if err := c.validatePluginRoot(); err != nil {
		return err
	}
	if len(c.Networks) > maxNetworks {
		return bad("networks", "at most %d networks, got %d", maxNetworks, len(c.Networks))
	}
	if err := networkNames("networks", c.Networks); err != nil {
		return err
	}
	if len(c.IfnamePrefix) > maxIfnamePrefixLen || !ifnameRe.MatchString(c.IfnamePrefix) {
		return bad("ifnamePrefix", "%q must be 1-%d letters, digits, '_' or '-', starting with a letter",
			c.IfnamePrefix, maxIfnamePrefixLen)
	}
	for _, iv := range []struct {
		key string
		d   time.Duration
	}{{"statusInterval", c.StatusInterval.D()}, {"checkInterval", c.CheckInterval.D()}} {
		if iv.d != 0 && (iv.d < time.Second || iv.d > 24*time.Hour) {
			return bad(iv.key, "%s must be 0 (off) or between 1s and 24h", iv.d)
		}
	}
	if d := c.CNITimeout.D(); d <= 0 || d > maxCNITimeout {
		return bad("cniTimeout", "%s must be > 0 and <= %s", d, maxCNITimeout)
	}
	if _, err := logrus.ParseLevel(c.LogLevel); err != nil {
		return bad("logLevel", "%q: want trace, debug, info, warn or error", c.LogLevel)
	}
	if c.RequireAnnotation && !c.PodSelection {
		return bad("requireAnnotation", "needs podSelection: true (pods choose their networks by annotation)")
	}
	if c.FailurePolicy != FailurePolicyFail && c.FailurePolicy != FailurePolicyIgnore {
		return bad("failurePolicy", "%q: want %q or %q", c.FailurePolicy, FailurePolicyFail, FailurePolicyIgnore)
	}
	if c.LogFile != "" && !filepath.IsAbs(c.LogFile) {
		return bad("logFile", "must be an absolute path, got %q", c.LogFile)
	}
	for key, list := range map[string][]string{"namespaces.include": c.Namespaces.Include, "namespaces.exclude": c.Namespaces.Exclude} {
		for i, ns := range list {
			if !validNamespace(ns) {
				return bad(fmt.Sprintf("%s[%d]", key, i), "%q is not a Kubernetes namespace name", ns)
			}
		}
	}
	if err := validatePodCapabilities(c.PodCapabilities); err != nil {
		return err
	}
	if err := validatePodCNIArgs(c.PodCNIArgs, c.PodCapabilities); err != nil {
		return err
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	if err := c.validateDefaultNetworks(); err != nil {
		return err
	}
	if err := c.FailClosed.validate(); err != nil {
		return err
	}
	if err := c.Kubernetes.validate(); err != nil {
		return err
	}
	for key, list := range map[string][]string{
		"hook.podNameAnnotations": c.Hook.PodNameAnnotations, "hook.podNamespaceAnnotations": c.Hook.PodNamespaceAnnotations,
		"hook.podUIDAnnotations": c.Hook.PodUIDAnnotations, "hook.sandboxIDAnnotations": c.Hook.SandboxIDAnnotations,
	} {
		for i, a := range list {
			if a == "" || strings.ContainsAny(a, " \t\n") {
				return bad(fmt.Sprintf("%s[%d]", key, i), "%q is not an annotation key", a)
			}
		}
	}
	return nil
}

// validatePluginRoot: an absolute, clean path; with it, binDirs name the
// host's dirs, never the container's view of them (<pluginRoot>/opt/cni/bin
// would be looked up at <pluginRoot>/<pluginRoot>/opt/cni/bin).
func (c *Config) validatePluginRoot() error {
	r := c.PluginRoot
	if r == "" || r == "/" {
		return nil
	}
	if !filepath.IsAbs(r) || filepath.Clean(r) != r {
		return fmt.Errorf("%w: pluginRoot: must be a clean absolute path (or empty), got %q", ErrInvalid, r)
	}
	for i, d := range c.BinDirs {
		if d == r || strings.HasPrefix(d, r+"/") {
			return fmt.Errorf("%w: binDirs[%d]: %q is under pluginRoot %q: with pluginRoot, binDirs are host paths, as the plugins see them inside it (%q)",
				ErrInvalid, i, d, r, "/"+strings.TrimLeft(strings.TrimPrefix(d, r), "/"))
		}
	}
	return nil
}

// Ifname returns the interface name of the i-th (0-based) attached network.
func (c *Config) Ifname(i int) string {
	return fmt.Sprintf("%s%d", c.IfnamePrefix, i+1)
}

// keyed makes a decode error name its key where encoding/json does not:
// when a custom unmarshaler (Duration, PortSpec) fails, encoding/json does
// not name the field, so the key is found by decoding data's values of
// those types one by one (unmarshalerKey).
func keyed(err error, data []byte) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: %w", te.Field, err)
	}
	if key := unmarshalerKey(data, &Config{}); key != "" {
		return fmt.Errorf("%s: %w", key, err)
	}
	return err
}
