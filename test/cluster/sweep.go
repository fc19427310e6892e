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
// primary bridge of its containerd and the dir. Called under the registry
// lock (shared.go).
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
	if b := primaryBridge(u.Dir); b != "" {
		_ = (&hostState{link: b}).delDummy()
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

// primaryBridge reads the bridge name of the cluster containerd's primary
// network from its conflist.
func primaryBridge(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "ctd", "net.d", "10-primary.conflist"))
	if err != nil {
		return ""
	}
	var conf struct {
		Plugins []struct {
			Bridge string `json:"bridge"`
		} `json:"plugins"`
	}
	if json.Unmarshal(data, &conf) != nil || len(conf.Plugins) == 0 {
		return ""
	}
	return conf.Plugins[0].Bridge
}
