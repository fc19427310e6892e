package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nri-cni/nri-cni/test/harness"
)

// sweep undoes, best effort, a cluster whose test process died before Close
// (its components run on in their own process groups): it kills by pid the
// processes whose command line names the cluster dir (every component and
// containerd shim does) and those left in its cgroups (the pods), then
// unmounts under the dir and removes the cgroups, the node interface, the
// primary bridge of its runtime (and CRI-O's cache entries of that network,
// which it keeps in /var/lib/cni/results) and the dir. Called under the
// registry lock (shared.go).
func sweep(u user) {
	if !strings.HasPrefix(u.Dir, "/") || len(u.Dir) < 5 {
		return // never sweep something like "/" from a corrupt entry
	}
	for _, pid := range procsNaming(u.Dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	h := &hostState{link: u.Link, cgroupRoot: u.CgroupRoot}
	if u.CgroupRoot != "" {
		killCgroupProcs(u.CgroupRoot)
	}
	time.Sleep(500 * time.Millisecond) // let the killed processes exit
	_ = harness.UnmountUnder(u.Dir)
	_ = h.removeCgroups()
	_ = h.delDummy()
	removeRuncState(u.Dir)
	for _, p := range primaryNetworks(u.Dir) {
		if p.bridge != "" {
			_ = (&hostState{link: p.bridge}).delDummy()
		}
		if p.crio && p.name != "" {
			cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", p.name+"-*"))
			for _, f := range cached {
				_ = os.Remove(f)
			}
		}
	}
	if u.RemoveDir {
		_ = os.RemoveAll(u.Dir)
	}
}

// procsNaming lists the pids of processes whose command line contains dir/.
func procsNaming(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killCgroupProcs kills the processes in root's cgroups (any hierarchy).
func killCgroupProcs(root string) {
	v1, v2, _ := cgroupHierarchies()
	for _, m := range append(v1, v2...) {
		_ = filepath.WalkDir(filepath.Join(m, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

// removeRuncState removes the state runc keeps outside the dir for the
// cluster's containers (their processes are gone): /run/containerd/runc/k8s.io/<id>
// when its state.json names dir, and the shim socket containerd derives
// from the address and id.
func removeRuncState(dir string) {
	const runcRoot = "/run/containerd/runc/k8s.io"
	entries, _ := os.ReadDir(runcRoot)
	for _, e := range entries {
		state, err := os.ReadFile(filepath.Join(runcRoot, e.Name(), "state.json"))
		if err != nil || !strings.Contains(string(state), dir+"/") {
			continue
		}
		_ = os.RemoveAll(filepath.Join(runcRoot, e.Name()))
		sum := sha256.Sum256([]byte(filepath.Join(dir, "ctd", "c.sock", "k8s.io", e.Name())))
		_ = os.Remove(filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])))
	}
}

// primaryNet is a runtime's own network as its conflist names it.
type primaryNet struct {
	name, bridge string
	crio         bool // CRI-O's: its CNI cache is the host's /var/lib/cni/results
}

// primaryNetworks reads the cluster runtime's primary network from its
// conflist (containerd's under ctd/net.d, CRI-O's, uniquely named, under
// crio/net.d).
func primaryNetworks(dir string) []primaryNet {
	ctd, _ := filepath.Glob(filepath.Join(dir, "ctd", "net.d", "*.conflist"))
	crio, _ := filepath.Glob(filepath.Join(dir, "crio", "net.d", "*.conflist"))
	var out []primaryNet
	for i, f := range append(ctd, crio...) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var conf struct {
			Name    string `json:"name"`
			Plugins []struct {
				Bridge string `json:"bridge"`
			} `json:"plugins"`
		}
		if json.Unmarshal(data, &conf) != nil || len(conf.Plugins) == 0 {
			continue
		}
		out = append(out, primaryNet{name: conf.Name, bridge: conf.Plugins[0].Bridge, crio: i >= len(ctd)})
	}
	return out
}
