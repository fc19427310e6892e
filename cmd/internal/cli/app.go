// Package cli is nri-cni's command line, shared by its two builds: nri-cni
// (the node's binary: NRI plugin, OCI hook, gc, status; no Kubernetes API
// client is linked into it) and nri-cni-k8s (the same commands plus
// Kubernetes mode, for the DaemonSet). main() of each is one line.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/metrics"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/reconcile"
)

// version is set at build time (-ldflags "-X github.com/nri-cni/nri-cni/cmd/internal/cli.version=…").
var version = ""

// defaultPath is used when the runtime starts us without PATH (pre-launched
// NRI plugins, hooks): CNI plugins exec iptables, ip and friends.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// app is the command line. Its I/O and environment are fields so tests need
// no process-global mutation.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// kube starts Kubernetes mode; cluster reads the API for
	// migrate-check. Both nil in a build without an API client.
	kube    Kubernetes
	cluster ClusterReader
}

// Kube is what only nri-cni-k8s links: Kubernetes mode, and read access to
// the API for migrate-check.
type Kube struct {
	Start   Kubernetes
	Cluster ClusterReader
}

// Kubernetes starts Kubernetes mode for cfg (its kubernetes section): the
// API clients, the NetworkAttachmentDefinition cache, the status writer.
// Only nri-cni-k8s links it.
type Kubernetes func(ctx context.Context, cfg config.Config, getenv func(string) string, log *logrus.Entry) (*KubeMode, error)

// KubeMode is what Kubernetes mode hands the engine.
type KubeMode struct {
	NADs   plan.NADSource
	Sink   attach.StatusSink
	Multus func() string
	// Claims are the prepared DRA claims (nil without the DRA driver).
	Claims attach.ClaimSource
	// Devices and DeviceInfo serve networks of device plugin resources
	// (the kubelet's PodResources API, the NPWG device-info files).
	Devices    attach.DeviceSource
	DeviceInfo attach.DeviceInfoFiles
	// Policy and Firewall enforce MultiNetworkPolicy (both nil when off).
	Policy   attach.PolicySource
	Firewall attach.Firewall
	// Start, if set, starts what needs the engine (hot-plug's pod
	// watcher, the DRA driver) once it is built.
	Start func(Started) error
	// Ready, if set, says whether Kubernetes mode is ready to serve pods
	// (its NAD cache synced): part of the readiness probe's answer.
	Ready func() error
}

// Started is what KubeMode.Start is handed: the engine, its resync, whether
// the plugin serves the runtime now (the DRA driver prepares claims only
// then) and the metrics (nil when not served).
type Started struct {
	Manager *attach.Manager
	Resync  *reconcile.Resyncer
	Serving func() error
	Metrics *metrics.Metrics
}

// Main runs the command line with the process's I/O and environment until
// SIGTERM or SIGINT, and returns the exit status. kube is nil in a build
// without Kubernetes mode.
func Main(args []string, kube *Kube) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Run(ctx, IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}, args, kube)
}

// IO is the command line's input, output and environment.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// Run runs the command line with io until ctx ends and returns the exit
// status (tests use it; main uses Main).
func Run(ctx context.Context, io IO, args []string, kube *Kube) int {
	a := &app{stdin: io.Stdin, stdout: io.Stdout, stderr: io.Stderr, getenv: io.Getenv}
	if kube != nil {
		a.kube, a.cluster = kube.Start, kube.Cluster
	}
	return a.run(ctx, args)
}

const usage = `usage:
  nri-cni run --config FILE [--socket PATH] [--name NAME] [--idx NN] [--metrics-addr ADDR]
                        external NRI plugin (DaemonSet, systemd); --metrics-addr serves
                        Prometheus /metrics and /healthz (off by default)
  nri-cni hook [--config FILE] [STAGE]
                        OCI hook (runc, podman, CRI-O hooks.d): createRuntime or
                        prestart attaches, poststop detaches; OCI state on stdin;
                        no STAGE: taken from the state's status (hooks.d)
  nri-cni gc [--config FILE]
                        tear down records whose container is gone, GC the CNI cache
  nri-cni status [--config FILE] [--json] [--networks | --dra]
                        every attachment on record; --networks: each network's
                        readiness only; --dra: the DRA driver's report of the
                        kubelet's DRA checkpoint only
  nri-cni healthz [--addr ADDR] [--ready]
                        exit 0 iff the plugin's /healthz is OK (liveness probe: connected);
                        --ready: its /readyz (readiness probe: connected, synchronized with
                        the runtime and, in Kubernetes mode, the NAD cache synced)
  nri-cni await --socket PATH --sandbox ID [--timeout D]
                        OCI hook nri-cni adds to a container whose pod is still being
                        attached (failClosed.hookSocket): waits for the attach
  nri-cni nad-policy [--config FILE | --configmap FILE] [--mode warn|audit|deny]
        [--namespace-selector SELECTOR] [--object-selector SELECTOR]
                        print the ValidatingAdmissionPolicy that judges at kubectl
                        apply the NetworkAttachmentDefinitions kubernetes.nadPolicy
                        refuses on the node (regenerate it after every change);
                        its binding warns (default) or refuses, in the namespaces
                        and NADs the label selectors match (default: all)
  nri-cni-k8s migrate-check [--config FILE | --from-configmap NS/NAME] [--conf-dir DIR]
        [--kubeconfig FILE] [--context NAME] [-n NAMESPACE] [-o table|json]
        [--chunk-size N] [--timeout D]
                        for Multus users, before switching: what nri-cni would attach,
                        refuse (and why) or ignore for every pod with
                        k8s.v1.cni.cncf.io/networks, and which NADs kubernetes.nadPolicy
                        refuses, read from the API (list only); exit 3 when a pod
                        would not get what Multus gives it or a NAD is refused
  nri-cni install-plugins [--replace] --from DIR --to DIR NAME...
                        copy CNI plugins that are absent (DaemonSet init container);
                        --replace: every one (nri-cni itself, for the await hook)
  nri-cni node-setup --runtime containerd|crio [--root DIR] [--config FILE]
                     [--config-dir DIR] [--force] [--check]
                        install the runtime drop-in (deploy/node) that makes pods
                        annotated required-plugins.noderesource.dev/pod: '["nri-cni"]'
                        wait for nri-cni (backups kept; an edited drop-in only with
                        --force), check the result and whether the running runtime
                        loaded it; never restarts the runtime. --check: exit 0
                        fail-closed, 1 not set up, 3 restart pending
  nri-cni version       print the version
  nri-cni               with NRI_PLUGIN_SOCKET set: pre-launched NRI plugin
                        (started by the runtime from its plugin dir)
`

func (a *app) run(ctx context.Context, args []string) int {
	if a.getenv("PATH") == "" {
		_ = os.Setenv("PATH", defaultPath)
	}
	if len(args) == 0 {
		if a.getenv(api.PluginSocketEnvVar) != "" {
			return prelaunched(ctx, a)
		}
		fmt.Fprint(a.stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return runExternal(ctx, a, args[1:])
	case "hook":
		return hookCmd(ctx, a, args[1:])
	case "gc":
		return gcCmd(ctx, a, args[1:])
	case "status":
		return statusCmd(ctx, a, args[1:])
	case "healthz":
		return healthzCmd(ctx, a, args[1:])
	case "await":
		return awaitCmd(ctx, a, args[1:])
	case "nad-policy":
		return nadPolicyCmd(ctx, a, args[1:])
	case "install-plugins":
		return installPluginsCmd(ctx, a, args[1:])
	case "migrate-check":
		return migrateCheckCmd(ctx, a, args[1:])
	case "node-setup":
		return nodeSetupCmd(ctx, a, args[1:])
	case "version", "--version", "-v":
		build := "no Kubernetes mode (nri-cni-k8s has it)"
		if a.kube != nil {
			build = "with Kubernetes mode"
		}
		fmt.Fprintf(a.stdout, "nri-cni %s (%s)\n", buildVersion(), build)
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(a.stdout, usage)
		return 0
	default:
		fmt.Fprintf(a.stderr, "nri-cni: unknown command %q\n%s", args[0], usage)
		return 2
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func (a *app) fail(format string, args ...any) int {
	fmt.Fprintf(a.stderr, "nri-cni: "+strings.TrimSuffix(format, "\n")+"\n", args...)
	return 1
}
