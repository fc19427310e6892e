package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Close stops and removes every pod, stops crio, ends the conmon and
// container processes it left (killed by pid), unmounts whatever is mounted
// under Dir, removes the pod cgroups CRI-O leaves with cgroupfs, its cache
// entries in /var/lib/cni/results and the primary bridge. It does not remove
// Dir.
func (c *CRIO) Close(ctx context.Context) error {
	var errs []error
	if c.cmd != nil {
		// Bounded: CRI-O waits for the infra container up to the request's
		// deadline; whatever is left after it is killed below.
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if cri, err := DialCRI(ctx, c.Address); err == nil {
			if _, err := cri.RemovePods(ctx, nil); err != nil {
				errs = append(errs, err)
			}
			cri.Close()
		}
		c.terminate(15 * time.Second)
	}
	ids := c.knownIDs()
	c.killLeftovers(ids)
	if err := UnmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	}
	for _, cg := range c.cgroups(ids) {
		if err := removeCgroup(cg); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removePodCgroupParent(c.Address); err != nil {
		errs = append(errs, err)
	}
	cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", c.PrimaryNetwork+"-*"))
	for _, f := range cached {
		_ = os.Remove(f)
	}
	_ = exec.Command("ip", "link", "del", c.PrimaryBridge).Run()
	return errors.Join(errs...)
}

// Leftovers describes what of this CRI-O is still on the host: processes
// naming Dir (crio, conmon) or living in its pod cgroups, mounts under Dir,
// its pod cgroups, pinned namespaces under NamespacesDir, CNI cache entries
// and the primary bridge. Empty after a clean Close.
func (c *CRIO) Leftovers() []string {
	var out []string
	ids := c.knownIDs()
	cgs := c.cgroups(ids)
	for _, pid := range c.pids(ids) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	for _, m := range mountsUnder(c.Dir) {
		out = append(out, "mount "+m)
	}
	for _, cg := range cgs {
		out = append(out, "cgroup "+cg)
	}
	pinned, _ := filepath.Glob(filepath.Join(c.NamespacesDir, "*", "*"))
	for _, p := range pinned {
		out = append(out, "pinned namespace "+p)
	}
	cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", c.PrimaryNetwork+"-*"))
	for _, f := range cached {
		out = append(out, "CNI cache "+f)
	}
	if exec.Command("ip", "link", "show", c.PrimaryBridge).Run() == nil {
		out = append(out, "bridge "+c.PrimaryBridge)
	}
	return out
}

var crioID = regexp.MustCompile(`\b[0-9a-f]{64}\b`)

// knownIDs are the sandbox and container ids this CRI-O used: every 64-hex
// id in its log (it logs each sandbox and container it creates) and in its
// storage and runc state.
func (c *CRIO) knownIDs() map[string]bool {
	ids := map[string]bool{}
	if data, err := os.ReadFile(c.LogPath); err == nil {
		for _, id := range crioID.FindAllString(string(data), -1) {
			ids[id] = true
		}
	}
	for _, dir := range []string{c.path("root/overlay-containers"), c.path("runc"), c.path("exits")} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if crioID.MatchString(e.Name()) {
				ids[e.Name()] = true
			}
		}
	}
	return ids
}

// killLeftovers force-deletes the runc containers left in CRI-O's private
// runc root and SIGKILLs, by pid, the processes that name Dir (conmon,
// crio) or live in this CRI-O's pod cgroups.
func (c *CRIO) killLeftovers(ids map[string]bool) {
	states, _ := os.ReadDir(c.path("runc"))
	for _, s := range states {
		_ = exec.Command(filepath.Join(c.tools.RuncDir, "runc"), "--root", c.path("runc"), "delete", "--force", s.Name()).Run()
	}
	for _, pid := range c.pids(ids) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Give the killed processes a moment to leave their cgroups.
	deadline := time.Now().Add(5 * time.Second)
	for len(c.pids(ids)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// pids lists this CRI-O's processes (ownsCmdline) and those in one of its
// pod cgroups.
func (c *CRIO) pids(ids map[string]bool) []int {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 { // gone, or a kernel thread
			continue
		}
		if c.ownsCmdline(string(cmdline)) || inCgroupOf(pid, ids) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ownsCmdline: a crio, conmon, runc (or the wrapper), pinns or podman
// process whose command line names Dir.
func (c *CRIO) ownsCmdline(cmdline string) bool {
	if !strings.Contains(cmdline, c.Dir+"/") {
		return false
	}
	args := strings.SplitN(cmdline, "\x00", 3)
	for _, a := range args[:min(2, len(args))] {
		switch filepath.Base(a) {
		case "crio", "conmon", "runc", "runc-wrapper", "pinns", "podman":
			return true
		}
	}
	return false
}

// inCgroupOf reports whether pid is in a cgroup named after one of ids.
func inCgroupOf(pid int, ids map[string]bool) bool {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, id := range crioID.FindAllString(sc.Text(), -1) {
			if ids[id] {
				return true
			}
		}
	}
	return false
}

// cgroups lists the cgroup dirs named after one of ids (crio-<id>,
// crio-conmon-<id>) in every mounted hierarchy, at the root, under CRI-O's
// default cgroupfs parent /crio and under the parent the harness's CRI
// clients give their pods.
func (c *CRIO) cgroups(ids map[string]bool) []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	var out []string
	for _, r := range roots {
		for _, parent := range []string{r, filepath.Join(r, "crio"), filepath.Join(r, PodCgroupParent(c.Address))} {
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				if !e.IsDir() {
					continue
				}
				if id := crioID.FindString(e.Name()); id != "" && ids[id] {
					out = append(out, filepath.Join(parent, e.Name()))
				}
			}
		}
	}
	return out
}

// removeCgroup removes a cgroup dir and its children, deepest first (a
// cgroupfs dir is removed with rmdir; its control files go with it).
func removeCgroup(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var err error
	for i := len(dirs) - 1; i >= 0; i-- {
		if e := syscall.Rmdir(dirs[i]); e != nil && !errors.Is(e, syscall.ENOENT) {
			err = fmt.Errorf("remove cgroup %s: %w", dirs[i], e)
		}
	}
	return err
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		if mp := unescapeMount(fields[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}
