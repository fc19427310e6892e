package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Every kubelet changes some host state that is not its own: kernel tunables,
// /var/log/containers, the fixed device-plugin directory, possibly KUBE-*
// iptables chains; and every cluster needs its Service range blackholed
// (blackhole.go). Several clusters may run at once (test packages run in
// parallel), so this state is recorded by the first cluster to start and
// restored by the last one to close: a registry under /run, guarded by a lock
// file in /run/lock. Entries of processes that died are pruned, and their
// recorded original state is kept, so a crashed run is healed by the next.

const (
	sharedDir  = "/run/nri-cni-k8s"
	sharedLock = "/run/lock/nri-cni-k8s.lock"
)

// kubeletSysctls are the kernel tunables the kubelet sets at start (its
// container manager's setupKernelTunables; protectKernelDefaults is off).
var kubeletSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

const varLogContainers = "/var/log/containers"

// devicePluginDirs: the kubelet's device manager puts its socket (and
// checkpoint) in this fixed directory whatever --root-dir says, and wipes
// what was there.
var devicePluginDirs = []string{"/var/lib/kubelet", "/var/lib/kubelet/device-plugins"}

// original is the host before the first cluster started.
type original struct {
	Sysctls  map[string]string `json:"sysctls"`
	MadeDirs []string          `json:"madeDirs"` // /var/log/containers, devicePluginDirs that did not exist
	Chains   []string          `json:"chains"`   // KUBE-* chains, "cmd table chain"
	// ServiceRoute: the host had its own route to ServiceCIDR (then no
	// blackhole is added or removed: blackhole.go).
	ServiceRoute bool `json:"serviceRoute"`
}

// user is one running cluster: the process holding it, that process's start
// time (pids are reused), and what to sweep if that process dies without
// closing the cluster (a test killed by its -timeout).
type user struct {
	Pid        int    `json:"pid"`
	Start      string `json:"start"`
	Dir        string `json:"dir"`
	RemoveDir  bool   `json:"removeDir"`
	Link       string `json:"link"`
	CgroupRoot string `json:"cgroupRoot"`
}

// joinHost registers cluster u.id: it sweeps clusters whose process died,
// and records the original host state if none is recorded.
func joinHost(id string, u user) error {
	return withSharedLock(func() error {
		if err := os.MkdirAll(filepath.Join(sharedDir, "users"), 0o755); err != nil {
			return fmt.Errorf("cluster registry: %w", err)
		}
		liveUsers()
		if _, err := os.Stat(filepath.Join(sharedDir, "original.json")); errors.Is(err, fs.ErrNotExist) {
			o := recordOriginal()
			if err := writeJSON(filepath.Join(sharedDir, "original.json"), o); err != nil {
				return err
			}
			if !o.ServiceRoute {
				if err := addServiceBlackhole(); err != nil {
					return err
				}
			}
		}
		u.Pid, u.Start = os.Getpid(), procStart(os.Getpid())
		return writeJSON(filepath.Join(sharedDir, "users", id), u)
	})
}

// leaveHost unregisters cluster id; the last live cluster restores the
// original host state and removes the registry.
func leaveHost(id string) error {
	return withSharedLock(func() error {
		_ = os.Remove(filepath.Join(sharedDir, "users", id))
		if liveUsers() > 0 {
			return nil
		}
		var o original
		data, err := os.ReadFile(filepath.Join(sharedDir, "original.json"))
		if err != nil {
			return fmt.Errorf("cluster registry: %w", err)
		}
		if err := json.Unmarshal(data, &o); err != nil {
			return fmt.Errorf("cluster registry %s: %w", sharedDir, err)
		}
		err = o.restore()
		if rmErr := os.RemoveAll(sharedDir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", sharedDir, rmErr))
		}
		return err
	})
}

// HealHost undoes what clusters whose test process died left on the host:
// it sweeps them (processes, mounts, cgroups, interfaces, dirs) and, when no
// cluster is left running, restores the recorded original host state and
// removes the registry. Start does the sweep too but keeps the original state
// recorded for the clusters to come; a test that compares the host before and
// after calls HealHost first, so a run killed earlier on this machine (by a
// -timeout, or a CI job cancelled) is not taken for the host as it was.
func HealHost() error {
	return withSharedLock(func() error {
		if _, err := os.Stat(sharedDir); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if liveUsers() > 0 {
			return nil
		}
		var errs []error
		data, err := os.ReadFile(filepath.Join(sharedDir, "original.json"))
		switch {
		case err == nil:
			var o original
			if err := json.Unmarshal(data, &o); err != nil {
				errs = append(errs, fmt.Errorf("cluster registry %s: %w", sharedDir, err))
			} else {
				errs = append(errs, o.restore())
			}
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("cluster registry: %w", err))
		}
		if err := os.RemoveAll(sharedDir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", sharedDir, err))
		}
		return errors.Join(errs...)
	})
}

func recordOriginal() original {
	o := original{Sysctls: ReadSysctls(), ServiceRoute: hostRoutesServiceRange()}
	for _, d := range append([]string{varLogContainers}, devicePluginDirs...) {
		if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
			o.MadeDirs = append(o.MadeDirs, d)
		}
	}
	for k := range kubeChains() {
		o.Chains = append(o.Chains, k.cmd+" "+k.table+" "+k.chain)
	}
	return o
}

// restore puts the host back: tunables, the directories the kubelets made
// (deepest first: everything in them is theirs) and the KUBE-* chains that
// appeared.
func (o original) restore() error {
	var errs []error
	for k, want := range o.Sysctls {
		got, err := os.ReadFile(sysctlPath(k))
		if err == nil && strings.TrimSpace(string(got)) == want {
			continue
		}
		if err := os.WriteFile(sysctlPath(k), []byte(want), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", k, want, err))
		}
	}
	for i := len(o.MadeDirs) - 1; i >= 0; i-- {
		if err := os.RemoveAll(o.MadeDirs[i]); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", o.MadeDirs[i], err))
		}
	}
	before := map[chainKey]bool{}
	for _, c := range o.Chains {
		if f := strings.Fields(c); len(f) == 3 {
			before[chainKey{f[0], f[1], f[2]}] = true
		}
	}
	if err := removeNewChains(before); err != nil {
		errs = append(errs, err)
	}
	if !o.ServiceRoute {
		if err := delServiceBlackhole(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// liveUsers counts the registered clusters whose process still runs; the
// others are swept (their processes ended, mounts, cgroups and interfaces
// removed) and unregistered.
func liveUsers() int {
	entries, _ := os.ReadDir(filepath.Join(sharedDir, "users"))
	n := 0
	for _, e := range entries {
		p := filepath.Join(sharedDir, "users", e.Name())
		var u user
		data, err := os.ReadFile(p)
		if err == nil && json.Unmarshal(data, &u) == nil && u.Start != "" && procStart(u.Pid) == u.Start {
			n++
			continue
		}
		if u.Dir != "" {
			sweep(u)
		}
		_ = os.Remove(p)
	}
	return n
}

// ClustersRunning counts the clusters registered on this host whose test
// process still runs (read only: nothing is swept). While any runs, the
// shared host state (tunables, the kubelet's default paths) is held for it.
func ClustersRunning() int {
	entries, _ := os.ReadDir(filepath.Join(sharedDir, "users"))
	n := 0
	for _, e := range entries {
		var u user
		data, err := os.ReadFile(filepath.Join(sharedDir, "users", e.Name()))
		if err == nil && json.Unmarshal(data, &u) == nil && u.Start != "" && procStart(u.Pid) == u.Start {
			n++
		}
	}
	return n
}

// procStart is field 22 of /proc/pid/stat (start time in clock ticks), "" if
// the process does not exist.
func procStart(pid int) string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	// The command name (field 2) may contain spaces: split after its ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

func withSharedLock(fn func() error) error {
	if err := os.MkdirAll(filepath.Dir(sharedLock), 0o755); err != nil {
		return fmt.Errorf("lock dir: %w", err)
	}
	f, err := os.OpenFile(sharedLock, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("cluster registry lock: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("cluster registry lock %s: %w", sharedLock, err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn()
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func sysctlPath(k string) string { return filepath.Join("/proc/sys", strings.ReplaceAll(k, ".", "/")) }

// ReadSysctls returns the current values of the tunables the kubelet changes.
func ReadSysctls() map[string]string {
	m := map[string]string{}
	for _, k := range kubeletSysctls {
		v, _ := os.ReadFile(sysctlPath(k))
		m[k] = strings.TrimSpace(string(v))
	}
	return m
}
