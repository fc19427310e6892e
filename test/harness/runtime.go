package harness

import (
	"context"
	"path/filepath"
	"time"
)

// Runtime is a container runtime started by the harness with NRI enabled:
// a private containerd or CRI-O. Tests that are about nri-cni's behaviour,
// not the runtime's, take a Runtime and run against both.
type Runtime interface {
	// Name is "containerd" or "crio".
	Name() string
	// CRIAddress is the CRI socket (a filesystem path) for DialCRI.
	CRIAddress() string
	// NRIAddress is the NRI socket external plugins dial.
	NRIAddress() string
	// NRIPluginPath holds pre-launched plugins (NN-name executables) and
	// NRIConfigPath their configs (NN-name.conf or name.conf).
	NRIPluginPath() string
	NRIConfigPath() string
	// PluginSynced and PrelaunchedSynced are the log lines the runtime
	// writes once an external, respectively pre-launched, plugin is
	// registered and synchronized (it then receives pod events).
	PluginSynced(name string) string
	PrelaunchedSynced(name string) string
	// Restart stops the runtime (SIGTERM) and starts it again with the same
	// config; pods keep running.
	Restart(ctx context.Context) error
	// Close removes every pod, stops the runtime and leaves nothing behind
	// (processes, mounts, bridge); it does not remove the runtime's dir.
	Close(ctx context.Context) error
	LogTail(n int) string
	CountLog(s string) int
	WaitLog(ctx context.Context, s string, n int, timeout time.Duration) error
}

var (
	_ Runtime = (*Containerd)(nil)
	_ Runtime = (*CRIO)(nil)
)

// Name implements Runtime.
func (c *Containerd) Name() string { return "containerd" }

// NetnsDir is where this containerd pins pod network namespaces: its
// config sets netns_mounts_under_state_dir, so under the CRI plugin's state
// dir rather than /var/run/netns.
func (c *Containerd) NetnsDir() string {
	return filepath.Join(c.Dir, "state", "io.containerd.grpc.v1.cri", "netns")
}

// CRIAddress implements Runtime.
func (c *Containerd) CRIAddress() string { return c.Address }

// NRIAddress implements Runtime.
func (c *Containerd) NRIAddress() string { return c.NRISocket }

// NRIPluginPath implements Runtime.
func (c *Containerd) NRIPluginPath() string { return c.NRIPluginDir }

// NRIConfigPath implements Runtime.
func (c *Containerd) NRIConfigPath() string { return c.NRIConfDir }

// PluginSynced implements Runtime (see the package function).
func (c *Containerd) PluginSynced(name string) string { return PluginSynced(name) }

// PrelaunchedSynced implements Runtime (see the package function).
func (c *Containerd) PrelaunchedSynced(name string) string { return PrelaunchedSynced(name) }
