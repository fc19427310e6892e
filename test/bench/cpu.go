package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's USER_HZ (100 on Linux).
const clockTick = 100

// ownCPU is the CPU time a process used itself (utime, stime of
// /proc/pid/stat).
func ownCPU(pid int) time.Duration { return procCPUOf(pid, 11, 12) }

// childrenCPU is the CPU time of a process's waited-for children (cutime,
// cstime): the CNI plugins nri-cni or containerd ran, the kubelet's mount
// and iptables helpers.
func childrenCPU(pid int) time.Duration { return procCPUOf(pid, 13, 14) }

func procCPUOf(pid int, fields ...int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields start after its ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, k := range fields { // 11 utime, 12 stime, 13 cutime, 14 cstime
		n, _ := strconv.ParseInt(f[k], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick
}

// nodeCPU is the CPU time every process of the machine used (all CPUs, from
// /proc/stat's cpu line: everything but idle and iowait).
func nodeCPU() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick
}

// cpuMeter measures the CPU time of named processes (and of the machine)
// between start and stop.
type cpuMeter struct {
	pids  map[string]int
	at    map[string]time.Duration
	node  time.Duration
	spent map[string]time.Duration
}

func startCPU(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, at: map[string]time.Duration{}, node: nodeCPU()}
	for name, pid := range pids {
		m.at[name] = ownCPU(pid)
		m.at[name+" (its children)"] = childrenCPU(pid)
	}
	return m
}

// stop records what each process (and "machine") used since start.
func (m *cpuMeter) stop() map[string]time.Duration {
	m.spent = map[string]time.Duration{"machine": nodeCPU() - m.node}
	for name, pid := range m.pids {
		m.spent[name] = ownCPU(pid) - m.at[name]
		if c := childrenCPU(pid) - m.at[name+" (its children)"]; c > 0 {
			m.spent[name+" (its children)"] = c
		}
	}
	return m.spent
}

// cpuNote formats spent, per pod of n, largest first.
func cpuNote(spent map[string]time.Duration, n int) string {
	names := make([]string, 0, len(spent))
	for k := range spent {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return spent[names[i]] > spent[names[j]] })
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, float64(spent[k].Milliseconds())/float64(n)))
	}
	return "CPU ms per pod: " + strings.Join(parts, ", ")
}
