package harness

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// runcWrapper is the runtime_path CRI-O runs: before runc create/run it
// edits the bundle's config.json, and before runc exec (exec probes) the
// process file it names (its capabilities, as below). Test-only, for what
// this host cannot do and CRI-O, unlike containerd, has no setting for:
//   - a negative process.oomScoreAdj is dropped: CRI-O asks for -998 on the
//     pause container (the kubelet for -997 on a critical pod) and has no
//     restrict_oom_score_adj; without CAP_SYS_RESOURCE runc would fail;
//   - capabilities outside this host's bounding set are dropped: for a
//     privileged container CRI-O lists every capability the kernel knows,
//     and runc fails "unable to apply caps: can't apply capabilities:
//     operation not permitted" (here CAP_SYS_RESOURCE is not in the bounding
//     set); containerd grants a privileged container the caps it has;
//   - linux.resources.hugepageLimits are dropped when no cgroup v1 hugetlb
//     hierarchy is mounted on a v1 host: CRI-O sees hugetlb in /proc/cgroups
//     (here it is in the hybrid unified hierarchy) and passes on the limits
//     the kubelet sends for every page size, and runc then fails every
//     container ("cannot set hugetlb limit: container could not join or
//     create cgroup"); containerd tolerates it (tolerate_missing_hugetlb_controller).
func (c *CRIO) runcWrapper() (string, error) {
	jq, err := exec.LookPath("jq")
	if err != nil {
		return "", fmt.Errorf("runc wrapper needs jq (test/tools/install.sh apt): %w", err)
	}
	test := `(.process.oomScoreAdj // 0) < 0`
	edit := `if (.process.oomScoreAdj // 0) < 0 then del(.process.oomScoreAdj) else . end`
	// An exec's process file: its capabilities only.
	procTest, procEdit := `false`, `.`
	if missing := capsNotBounding(); len(missing) > 0 {
		list := `["` + strings.Join(missing, `","`) + `"]`
		test += ` or ([(.process.capabilities // {})[] | .[]?] - (` + list + `) != [(.process.capabilities // {})[] | .[]?])`
		edit += ` | if .process.capabilities then .process.capabilities |= with_entries(.value = ((.value // []) - ` + list + `)) else . end`
		procTest = `([(.capabilities // {})[] | .[]?] - (` + list + `) != [(.capabilities // {})[] | .[]?])`
		procEdit = `if .capabilities then .capabilities |= with_entries(.value = ((.value // []) - ` + list + `)) else . end`
	}
	if hugetlbUnusable() {
		test += ` or ((.linux.resources.hugepageLimits // []) | length > 0)`
		edit += ` | del(.linux.resources.hugepageLimits)`
	}
	return fmt.Sprintf(`#!/bin/bash
# Test-only runc wrapper written by the nri-cni harness (see crio_wrapper.go).
set -e
bundle= proc= prev=
for a in "$@"; do
	case $prev in --bundle|-b) bundle=$a ;; --process|-p) proc=$a ;; esac
	case $a in --bundle=*) bundle=${a#--bundle=} ;; --process=*) proc=${a#--process=} ;; esac
	prev=$a
done
cfg=$bundle/config.json
if [[ -n $bundle && -f $cfg ]] && %[1]s -e %[3]q "$cfg" >/dev/null; then
	%[1]s %[4]q "$cfg" >"$cfg.nri-cni-tmp"
	mv "$cfg.nri-cni-tmp" "$cfg"
fi
if [[ -n $proc && -f $proc ]] && %[1]s -e %[5]q "$proc" >/dev/null; then
	%[1]s %[6]q "$proc" >"$proc.nri-cni-tmp"
	mv "$proc.nri-cni-tmp" "$proc"
fi
exec %[2]q "$@"
`, jq, c.runc, test, edit, procTest, procEdit), nil
}

// capNames are the capabilities by number (linux/capability.h; a stable
// ABI), as OCI specs name them.
var capNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
	"LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
	"SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
	"SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
	"MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
	"CHECKPOINT_RESTORE",
}

// capsNotBounding lists the capabilities (CAP_*) the kernel knows that are
// not in this process's bounding set: no container runc starts can have them.
func capsNotBounding() []string {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	var bnd uint64
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			if bnd, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				return nil
			}
		}
	}
	last := len(capNames) - 1
	if data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && n < last {
			last = n
		}
	}
	var out []string
	for i := 0; i <= last; i++ {
		if bnd&(1<<i) == 0 {
			out = append(out, "CAP_"+capNames[i])
		}
	}
	return out
}

// hugetlbUnusable reports whether runc cannot set hugetlb limits here: a
// cgroup v1 (or hybrid) host without a v1 hugetlb hierarchy mounted.
func hugetlbUnusable() bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	v1 := false
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		_, post, ok := strings.Cut(line, " - ")
		pf := strings.Fields(post)
		if !ok || len(fields) < 5 || len(pf) < 3 {
			continue
		}
		if fields[4] == "/sys/fs/cgroup" && pf[0] == "cgroup2" {
			return false // unified only: runc sets hugetlb in v2
		}
		if pf[0] == "cgroup" {
			v1 = true
			for _, opt := range strings.Split(pf[2], ",") {
				if opt == "hugetlb" {
					return false
				}
			}
		}
	}
	return v1
}
