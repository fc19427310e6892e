// Package cni runs CNI operations through libcni: it loads and validates the
// network configs, builds each call's runtime config, ADDs and DELs network
// lists with libcni's result cache, and bounds every call in time.
//
// It returns errors and never logs; callers add pod context and log.
package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
)

// Errors.
var (
	ErrUnknownNetwork = errors.New("unknown network")
	ErrNoNetworks     = errors.New("no valid CNI network config")
	// ErrNoConfDir: the CNI config dir (nri.conf confDir) does not exist
	// (it wraps the fs.ErrNotExist too).
	ErrNoConfDir = errors.New("CNI config dir (nri.conf confDir) does not exist")
	// ErrSkippedMissing: DEL succeeded for the chain except plugins whose
	// binaries are gone (they cannot be run, so nothing can clean up after
	// them). Callers treat it as success and warn.
	ErrSkippedMissing = errors.New("DEL skipped plugins whose binaries are missing")
)

// Options configures an Engine.
type Options struct {
	ConfDir  string
	BinDirs  []string
	CacheDir string
	// Exec runs plugins; nil means the real exec (tests inject fakes).
	Exec invoke.Exec
	// PluginRoot (nri.conf pluginRoot): the real exec runs every plugin
	// chrooted into it, and BinDirs are paths inside it (pluginroot.go).
	// "" or "/": plugins run in nri-cni's own root. Not applied to Exec.
	PluginRoot string
	// NoValidate loads configs without asking each plugin binary for its
	// versions (one exec per plugin): for one-shot commands such as the OCI
	// hook, where a missing plugin still fails the ADD with a clear error.
	NoValidate bool
}

// Engine runs CNI ADD/DEL for attachments. The loaded network set can be
// replaced at any time (Reload); calls in flight keep the set they started with.
type Engine struct {
	opts Options
	exec invoke.Exec // runs plugins; nil: libcni's own
	cni  *libcni.CNIConfig
	// check runs CHECK (same cache), host-side MACs left out (check.go).
	check *libcni.CNIConfig

	mu       sync.RWMutex // guards networks; never held across a CNI exec
	networks []*Network
}

// New returns an Engine. Call Reload to load the configs.
func New(opts Options) *Engine {
	exec := opts.Exec
	if exec == nil {
		exec = newRootExec(opts.PluginRoot, os.Stderr)
	}
	return &Engine{
		opts:  opts,
		exec:  exec,
		cni:   libcni.NewCNIConfigWithCacheDir(opts.BinDirs, opts.CacheDir, exec),
		check: libcni.NewCNIConfigWithCacheDir(opts.BinDirs, opts.CacheDir, newCheckExec(exec)),
	}
}

// FindPlugin finds a plugin's binary in the bin dirs as ADD will (inside
// the plugin root when there is one) and returns its path there.
func (e *Engine) FindPlugin(typ string) (string, error) {
	if e.exec == nil {
		return invoke.FindInPath(typ, e.opts.BinDirs)
	}
	return e.exec.FindInPath(typ, e.opts.BinDirs)
}

// CNI exposes the libcni client (GC, benchmarks).
func (e *Engine) CNI() *libcni.CNIConfig { return e.cni }

// Reload re-reads the config directory. skipped names each invalid file.
//
// A config directory that does not exist while no network is loaded (the
// first load) loads nothing: skipped then holds that error alone
// (ErrNoConfDir), and the catalogue is empty — nri-cni's own missing config
// is not an error for pods that ask for no network by name (the OCI hook runs
// for every container). Whoever must not start without the directory checks
// for it (the NRI plugin does, at start). Once networks are loaded, a
// directory that went away is an error and they are kept.
func (e *Engine) Reload(ctx context.Context) (skipped []error, err error) {
	var c libcni.CNI = e.cni
	if e.opts.NoValidate {
		c = nil
	}
	nets, skipped, err := LoadDir(ctx, c, e.opts.ConfDir)
	if errors.Is(err, ErrNoConfDir) && len(e.Networks()) == 0 {
		e.mu.Lock()
		e.networks = nil
		e.mu.Unlock()
		return []error{err}, nil
	}
	if err != nil {
		return nil, err
	}
	// What nri-cni ADDs carries its marker into libcni's cache (owner.go).
	for i, n := range nets {
		if owned, err := n.Owned(Owner{}); err == nil {
			nets[i] = owned
		}
	}
	e.mu.Lock()
	e.networks = nets
	e.mu.Unlock()
	return skipped, nil
}

// Networks returns the loaded networks in file order.
func (e *Engine) Networks() []*Network {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return append([]*Network(nil), e.networks...)
}

// Select returns the networks named, in order; with no names, the first valid
// network (the kubelet's rule).
func (e *Engine) Select(names []string) ([]*Network, error) {
	return Select(e.Networks(), names, e.opts.ConfDir)
}

// Select picks the networks named from nets (loaded from confDir), in
// order; with no names, the first one (the kubelet's rule).
func Select(nets []*Network, names []string, confDir string) ([]*Network, error) {
	if len(names) == 0 {
		if len(nets) == 0 {
			return nil, fmt.Errorf("%w in %s", ErrNoNetworks, confDir)
		}
		return nets[:1], nil
	}
	byName := make(map[string]*Network, len(nets))
	for _, n := range nets {
		byName[n.Name] = n
	}
	out := make([]*Network, 0, len(names))
	for _, name := range names {
		n, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("%w %q: no valid config with that name in %s", ErrUnknownNetwork, name, confDir)
		}
		out = append(out, n)
	}
	return out, nil
}

// Attachment is one (container, interface) pair, the CNI unit of work.
type Attachment struct {
	ContainerID    string
	IfName         string
	Netns          string // "" for a best-effort DEL
	Args           [][2]string
	CapabilityArgs map[string]any
}

func (a Attachment) runtimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID:    a.ContainerID,
		NetNS:          a.Netns,
		IfName:         a.IfName,
		Args:           a.Args,
		CapabilityArgs: a.CapabilityArgs,
	}
}

// Add runs ADD of network n for a.
func (e *Engine) Add(ctx context.Context, n *Network, a Attachment) (*Result, error) {
	res, err := e.cni.AddNetworkList(ctx, n.List, a.runtimeConf())
	if err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	return summarize(res, a.IfName)
}

// Del runs DEL of network name for a. It prefers the config libcni cached at
// ADD time (so a config changed or removed since still tears down what was
// set up), then the currently loaded config. With neither there is nothing
// nri-cni could have added, and Del returns nil.
func (e *Engine) Del(ctx context.Context, name string, a Attachment) error {
	return e.DelFallback(ctx, name, nil, a)
}

// DelFallback is Del with fallback (if not nil) used instead of the loaded
// configs when libcni cached nothing: the network an ADD that failed
// part-way ran with (libcni caches only complete ADDs), when it is not a
// confDir network.
func (e *Engine) DelFallback(ctx context.Context, name string, fallback *Network, a Attachment) error {
	rt := a.runtimeConf()
	list, cachedRT, err := e.cachedList(name, rt)
	if err != nil {
		return fmt.Errorf("network %q: %w", name, err)
	}
	if list != nil {
		if cachedRT != nil {
			// DEL must see the ADD's args and capabilities.
			rt.Args, rt.CapabilityArgs = cachedRT.Args, cachedRT.CapabilityArgs
		}
	} else if fallback != nil {
		list = fallback.List
	} else {
		for _, n := range e.Networks() {
			if n.Name == name {
				list = n.List
				break
			}
		}
		if list == nil {
			return nil
		}
	}
	err = e.cni.DelNetworkList(ctx, list, rt)
	if err == nil {
		return nil
	}
	// libcni stops a DEL at the first failing plugin, so one missing binary
	// would keep every plugin before it in the chain (bridge, IPAM) from
	// ever releasing: DEL again without the missing ones.
	if reduced, missing := e.withoutMissing(list); len(missing) > 0 && len(reduced.Plugins) > 0 {
		if err2 := e.cni.DelNetworkList(ctx, reduced, rt); err2 == nil {
			return fmt.Errorf("network %q: %w: %v (first DEL: %v)", name, ErrSkippedMissing, missing, err)
		}
	}
	return fmt.Errorf("network %q: %w", name, err)
}

// withoutMissing returns list minus the plugins whose binaries are not in
// the bin dirs, and their types.
func (e *Engine) withoutMissing(list *libcni.NetworkConfigList) (*libcni.NetworkConfigList, []string) {
	reduced := *list
	reduced.Plugins = nil
	var missing []string
	for _, p := range list.Plugins {
		if _, err := e.FindPlugin(p.Network.Type); err != nil {
			missing = append(missing, p.Network.Type)
			continue
		}
		reduced.Plugins = append(reduced.Plugins, p)
	}
	return &reduced, missing
}

func (e *Engine) cachedList(name string, rt *libcni.RuntimeConf) (*libcni.NetworkConfigList, *libcni.RuntimeConf, error) {
	data, cachedRT, err := e.cni.GetNetworkListCachedConfig(&libcni.NetworkConfigList{Name: name}, rt)
	if err != nil || len(data) == 0 {
		// An unreadable cache entry is as good as none: fall back to the
		// loaded config, as libcni itself does.
		return nil, nil, nil //nolint:nilerr
	}
	list, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return nil, nil, nil //nolint:nilerr
	}
	return list, cachedRT, nil
}

// CachedAttachments lists what libcni's cache holds for containerID (all
// containers when empty).
func (e *Engine) CachedAttachments(containerID string) ([]*libcni.NetworkAttachment, error) {
	return e.cni.GetCachedAttachments(containerID)
}

// GC runs libcni's GC for network n: DEL of cached attachments not in valid
// (callers DEL those themselves first, with an empty netns) and, for CNI
// 1.1.0 configs, the plugins' own GC with the valid attachments.
func (e *Engine) GC(ctx context.Context, n *Network, valid []types.GCAttachment) error {
	return e.cni.GCNetworkList(ctx, n.List, &libcni.GCArgs{ValidAttachments: valid})
}

// Status asks the network's plugins for their readiness (CNI STATUS, spec
// 1.1.0): nil when every plugin is ready. A config older than 1.1.0 is
// ready (libcni does not ask).
func (e *Engine) Status(ctx context.Context, n *Network) error {
	if err := e.cni.GetStatusNetworkList(ctx, n.List); err != nil {
		return fmt.Errorf("network %q: %w", n.Name, err)
	}
	return nil
}

// ErrNoCachedConfig: CHECK has nothing to check against (libcni cached no
// ADD for the attachment).
var ErrNoCachedConfig = errors.New("no cached ADD to check against")

// Check runs CNI CHECK for an attachment, with the config and args libcni
// cached at its ADD (CHECK compares the interface with the cached result).
func (e *Engine) Check(ctx context.Context, name string, a Attachment) error {
	rt := a.runtimeConf()
	list, cachedRT, err := e.cachedList(name, rt)
	if err != nil {
		return fmt.Errorf("network %q: %w", name, err)
	}
	if list == nil {
		return fmt.Errorf("network %q: %w", name, ErrNoCachedConfig)
	}
	if cachedRT != nil {
		rt.Args, rt.CapabilityArgs = cachedRT.Args, cachedRT.CapabilityArgs
	}
	if err := e.check.CheckNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("network %q: %w", name, err)
	}
	return nil
}

// CachedResult summarises the result libcni cached for att's ADD (its
// addresses and MAC).
func (e *Engine) CachedResult(att *libcni.NetworkAttachment) (*Result, error) {
	list, err := libcni.NetworkConfFromBytes(att.Config)
	if err != nil {
		return nil, fmt.Errorf("cached config of network %q: %w", att.Network, err)
	}
	res, err := e.cni.GetNetworkListCachedResult(list, &libcni.RuntimeConf{ContainerID: att.ContainerID, IfName: att.IfName})
	if err != nil {
		return nil, fmt.Errorf("cached result of network %q: %w", att.Network, err)
	}
	return summarize(res, att.IfName)
}
