package config

import (
	"fmt"
	"path/filepath"
	"time"
)

// Defaults of the failClosed section.
const (
	DefaultContainerdConfig = "/etc/containerd/config.toml"
	DefaultCRIOConfig       = "/etc/crio/crio.conf"
	DefaultCRIOConfigDir    = "/etc/crio/crio.conf.d"
	// DefaultHookTimeout bounds how long the await hook holds a container's
	// start for its pod's attach.
	DefaultHookTimeout = 60 * time.Second
	// MinHookTimeout is the shortest hookTimeout: a background attach runs
	// for up to its budget (30 s) once it has a slot, and one the hook
	// waits for is run beside the slots at the latest its budget and a
	// 5-s margin before the hook's deadline (attach.Background.Urgent).
	// A shorter hook would fail containers whose attach was still on time.
	MinHookTimeout = 40 * time.Second
	// DefaultRestartGrace is how long a container stopped by
	// failClosed.restartStarted gets between SIGTERM and SIGKILL: the
	// kubelet's default terminationGracePeriodSeconds.
	DefaultRestartGrace = 30 * time.Second
)

// FailClosedConfig is about pods whose containers must not run before their
// networks are attached, also while nri-cni is away (installing, restarting,
// upgrading): the node's runtime refuses their containers until nri-cni is
// back (NRI's default validator, deploy/node). nri-cni checks that the node
// is set up so, and what it does when it finds a container that started
// anyway (docs/failure-semantics.md, "Fail-closed").
type FailClosedConfig struct {
	// NodeRoot is where the host's root directory is seen ("" or "/": nri-cni
	// runs on the host; the DaemonSet mounts the host's / at /host, which is
	// also its PluginRoot).
	// The runtime's config files below are read under it.
	NodeRoot string `json:"nodeRoot"`
	// ContainerdConfig is containerd's main config file (its imports are
	// followed); CRIOConfig and CRIOConfigDir are CRI-O's.
	ContainerdConfig string `json:"containerdConfig"`
	CRIOConfig       string `json:"crioConfig"`
	CRIOConfigDir    string `json:"crioConfigDir"`
	// RestartStarted: a container found running before its pod's networks
	// were attached (a node whose runtime does not refuse it) is stopped
	// once the pod is attached — SIGTERM, then SIGKILL after RestartGrace —
	// so that the kubelet starts it again with the networks in place (as the
	// pod's restartPolicy says: with Never it is not started again). Off by
	// default: it is always reported (Event, metric, log).
	RestartStarted bool `json:"restartStarted"`
	// RestartGrace: see RestartStarted.
	RestartGrace Duration `json:"restartGrace"`
	// HookSocket turns on the await hook (backgroundAttach): a container of
	// a pod whose attach is still running is not waited for inside NRI's
	// CreateContainer (where a crash or an overrun deadline of nri-cni lets
	// the runtime create it without the networks); nri-cni answers at once
	// and adds an OCI createRuntime hook to it, which waits for the attach
	// by asking nri-cni on this socket (a host path), nri-cni restarting
	// meanwhile included. "" (the default): off.
	HookSocket string `json:"hookSocket"`
	// HookPath is the nri-cni binary the runtime runs as that hook (a host
	// path; "": the running binary, when nri-cni runs on the host, nodeRoot
	// "/"). The DaemonSet installs a copy at /opt/nri-cni/bin.
	HookPath string `json:"hookPath"`
	// HookTimeout bounds the hook's wait; then the container's start fails
	// and the kubelet retries it.
	HookTimeout Duration `json:"hookTimeout"`
}

// DefaultFailClosed is the failClosed section when the file sets none.
func DefaultFailClosed() FailClosedConfig {
	return FailClosedConfig{
		NodeRoot:         "/",
		ContainerdConfig: DefaultContainerdConfig,
		CRIOConfig:       DefaultCRIOConfig,
		CRIOConfigDir:    DefaultCRIOConfigDir,
		RestartGrace:     Duration(DefaultRestartGrace),
		HookTimeout:      Duration(DefaultHookTimeout),
	}
}

func (f FailClosedConfig) validate() error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
	}
	for key, p := range map[string]string{"failClosed.nodeRoot": f.NodeRoot, "failClosed.containerdConfig": f.ContainerdConfig,
		"failClosed.crioConfig": f.CRIOConfig, "failClosed.crioConfigDir": f.CRIOConfigDir,
		"failClosed.hookSocket": f.HookSocket, "failClosed.hookPath": f.HookPath} {
		if p != "" && !filepath.IsAbs(p) {
			return bad(key, "must be an absolute path, got %q", p)
		}
	}
	if d := f.RestartGrace.D(); d < 0 || d > 10*time.Minute {
		return bad("failClosed.restartGrace", "%s must be between 0 and 10m", d)
	}
	if d := f.HookTimeout.D(); d < MinHookTimeout || d > 10*time.Minute {
		return bad("failClosed.hookTimeout", "%s must be between %s (a background attach's 30-s budget and the time to "+
			"start it: a shorter hook fails containers whose pod's attach is still on time) and 10m", d, MinHookTimeout)
	}
	if f.HookSocket != "" && len(f.HookSocket) > maxSocketPath {
		return bad("failClosed.hookSocket", "%q is longer than a unix socket path may be (%d)", f.HookSocket, maxSocketPath)
	}
	if f.HookPath == "" && f.HookSocket != "" && f.NodeRoot != "" && f.NodeRoot != "/" {
		return bad("failClosed.hookPath", "must be set (the nri-cni binary on the host) when nri-cni does not run on the host (nodeRoot %q)", f.NodeRoot)
	}
	return nil
}

// HookOn reports whether the await hook is on.
func (f FailClosedConfig) HookOn() bool { return f.HookSocket != "" }

// maxSocketPath is sun_path's size less its terminating NUL.
const maxSocketPath = 107
