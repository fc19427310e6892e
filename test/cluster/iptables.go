package cluster

import (
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
)

// With makeIPTablesUtilChains false the kubelet v1.34 adds no chains (true
// would add KUBE-IPTABLES-HINT, KUBE-FIREWALL with jumps from INPUT/OUTPUT
// and KUBE-KUBELET-CANARY). As a guard, the KUBE-* chains are recorded before
// the first cluster starts and the ones that appeared are removed after the
// last one closed.

type chainKey struct{ cmd, table, chain string }

func (k chainKey) String() string { return k.cmd + " -t " + k.table + " " + k.chain }

var (
	iptablesCmds   = []string{"iptables", "ip6tables"}
	iptablesTables = []string{"filter", "nat", "mangle", "raw"}
)

// KubeChains lists the KUBE-* chains in the host's iptables and ip6tables
// tables, as "iptables -t mangle KUBE-X" strings (sorted).
func KubeChains() []string {
	var out []string
	for k := range kubeChains() {
		out = append(out, k.String())
	}
	sort.Strings(out)
	return out
}

func kubeChains() map[chainKey]bool {
	m := map[chainKey]bool{}
	for _, cmd := range iptablesCmds {
		for _, t := range iptablesTables {
			for _, l := range iptablesRules(cmd, t) {
				if name, ok := strings.CutPrefix(l, "-N "); ok && strings.HasPrefix(name, "KUBE-") {
					m[chainKey{cmd, t, name}] = true
				}
			}
		}
	}
	return m
}

// iptablesRules is `cmd -t table -S` split in lines (nil when the command or
// table is not there).
func iptablesRules(cmd, table string) []string {
	out, err := exec.Command(cmd, "-w", "5", "-t", table, "-S").Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// removeNewChains deletes the KUBE-* chains that are not in before (rules
// jumping to them first). Called by the last cluster to close (shared.go).
func removeNewChains(before map[chainKey]bool) error {
	var added []chainKey
	for k := range kubeChains() {
		if !before[k] {
			added = append(added, k)
		}
	}
	if len(added) == 0 {
		return nil
	}
	var errs []error
	for _, k := range added {
		for _, l := range iptablesRules(k.cmd, k.table) {
			if rule, ok := strings.CutPrefix(l, "-A "); ok && strings.Contains(l+" ", " -j "+k.chain+" ") {
				args := append([]string{"-w", "5", "-t", k.table, "-D"}, strings.Fields(rule)...)
				if out, err := exec.Command(k.cmd, args...).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s %v: %w: %s", k.cmd, args, err, out))
				}
			}
		}
	}
	for _, k := range added {
		for _, op := range []string{"-F", "-X"} {
			if out, err := exec.Command(k.cmd, "-w", "5", "-t", k.table, op, k.chain).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w: %s", op, k, err, out))
			}
		}
	}
	return errors.Join(errs...)
}
