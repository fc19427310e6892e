package hostroot

// Whether nri-cni sees the host's processes (the DaemonSet's hostPID).
//
// With the host's / at a root, nri-cni relies on one PID namespace for
// three things: the pids the runtime sends (NRI's Pid, read as
// /proc/<pid>/ns/net), the namespaces it holds open for a plugin as
// /proc/<its own pid>/fd/<fd> (netns.Hold), which the plugins chrooted into
// the root read in the root's /proc (cni's checkNetns leaves /proc paths
// alone for that reason), and the kubelet's DRA checkpoint read through
// /proc/1/root. In a PID namespace of its own, each of those names another
// process, or none.
//
// The check asks the kernel how each /proc numbers this very process: a
// process's status file lists its pid in every PID namespace from the one
// of that /proc mount down to its own (NSpid). One number, its own pid,
// in nri-cni's /proc and in the root's: the three are one namespace. On a
// node with hostPID that is the host's (on a kind node, the node
// container's, where its runtime runs); in a pod without hostPID the
// root's /proc lists two numbers (the host's and the pod's). Only the
// process's own status is read, which needs no access to other processes
// (pid 1 may be closed to it). A stand-in root whose /proc is the
// machine's (the tests' node roots) is judged by the same rule.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNotHostPID: nri-cni does not see the PIDs the processes under the root
// have.
var ErrNotHostPID = errors.New("nri-cni does not see the host's PIDs")

// CheckPIDs reports, when root is On, whether nri-cni's PID namespace is
// the one its /proc and the root's /proc show: ErrNotHostPID when it is
// not (run it with hostPID), another error when that cannot be told (the
// root has no /proc). Off: nil, nothing read.
func CheckPIDs(root string) error { return checkPIDs("/proc", root, os.Getpid()) }

// checkPIDs is CheckPIDs with nri-cni's /proc at proc and its pid (tests).
func checkPIDs(proc, root string, pid int) error {
	if !On(root) {
		return nil
	}
	rootProc, err := Path(root, "/proc")
	if err != nil {
		return fmt.Errorf("cannot tell whether nri-cni sees the host's PIDs: %s/proc: %w", root, err)
	}
	for _, p := range []struct{ what, status string }{
		{"nri-cni's own /proc", filepath.Join(proc, "self/status")},
		{filepath.Join(root, "proc") + " (the host's)", filepath.Join(rootProc, "self/status")},
	} {
		ids, err := nsPIDs(p.status)
		if err != nil {
			return fmt.Errorf("cannot tell whether nri-cni sees the host's PIDs: %s: %w", p.what, err)
		}
		if len(ids) != 1 || ids[0] != strconv.Itoa(pid) {
			return fmt.Errorf("%w: %s numbers this process %s (NSpid in %s); its own PID namespace numbers it %d",
				ErrNotHostPID, p.what, strings.Join(ids, " then "), p.status, pid)
		}
	}
	return nil
}

// nsPIDs reads the NSpid line of a status file: the process's pid in each
// PID namespace from the file's /proc down to its own.
func nsPIDs(status string) ([]string, error) {
	f, err := os.Open(status)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			if ids := strings.Fields(v); len(ids) > 0 {
				return ids, nil
			}
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", status, err)
	}
	return nil, fmt.Errorf("%s: no NSpid line (Linux 4.1 or later has one)", status)
}
