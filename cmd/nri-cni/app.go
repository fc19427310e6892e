package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/containerd/nri/pkg/api"
)

// version is set at build time (-ldflags "-X main.version=…").
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
  nri-cni status [--config FILE] [--json]
                        every attachment on record
  nri-cni healthz [--addr ADDR]
                        exit 0 iff the plugin's /healthz is OK (liveness probe)
  nri-cni nad-policy [--config FILE | --configmap FILE]
                        print the ValidatingAdmissionPolicy that refuses at kubectl
                        apply the NetworkAttachmentDefinitions kubernetes.nadPolicy
                        refuses on the node (regenerate it after every change)
  nri-cni install-plugins --from DIR --to DIR NAME...
                        copy CNI plugins that are absent (DaemonSet init container)
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
			return a.prelaunched(ctx)
		}
		fmt.Fprint(a.stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return a.runExternal(ctx, args[1:])
	case "hook":
		return a.hookCmd(ctx, args[1:])
	case "gc":
		return a.gcCmd(ctx, args[1:])
	case "status":
		return a.statusCmd(ctx, args[1:])
	case "healthz":
		return a.healthzCmd(ctx, args[1:])
	case "nad-policy":
		return a.nadPolicyCmd(ctx, args[1:])
	case "install-plugins":
		return a.installPluginsCmd(ctx, args[1:])
	case "version", "--version", "-v":
		fmt.Fprintf(a.stdout, "nri-cni %s\n", buildVersion())
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
