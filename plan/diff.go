package plan

import "github.com/nri-cni/nri-cni/state"

// Diff matches a sandbox's recorded networks with a new plan (hot-plug). A
// planned network whose interface the pod named matches a recorded one with
// that network and interface; one named by nri-cni matches any recorded one
// of that network not matched yet, and keeps its interface. keep maps plan
// index to record index; add are the unmatched planned networks (auto-named
// ones renamed to names free of the kept and added ones); remove are the
// unmatched record indexes, and pending ones (ADD never confirmed: redone).
//
// Default networks (nri.conf's defaultNetworks) are decided when the pod
// starts: Diff matches planned ones with recorded ones only, never adds one
// the record lacks and never removes a recorded one (a config reload
// changes what new pods get, not what a running pod's hot-plug does).
func (p *Planner) Diff(recorded []state.Network, plan []Attachment) (keep map[int]int, add []Attachment, remove []int) {
	keep = map[int]int{}
	used := map[int]bool{}
	// A claim's network is its claim device's; the others are their NAD's
	// or their network's.
	id := func(nad, name string, c *state.ClaimRef, def bool) string {
		switch {
		case c != nil:
			return "claim:" + c.UID + "/" + c.Request + "/" + c.Pool + "/" + c.Device + "/" + c.ShareID
		case def && nad != "":
			return "default:nad:" + nad
		case def:
			return "default:cni:" + name
		case nad != "":
			return "nad:" + nad
		}
		return "cni:" + name
	}
	match := func(i int, sameIf bool) {
		a := plan[i]
		for r, n := range recorded {
			if used[r] || n.Pending || id(n.NAD, n.Name, n.Claim, n.Default) != id(a.NAD, a.Network.Name, a.Claim, a.Default) ||
				(sameIf && n.IfName != a.IfName) {
				continue
			}
			keep[i], used[r] = r, true
			return
		}
	}
	for i := range plan {
		if plan[i].Explicit {
			match(i, true)
		}
	}
	for i := range plan {
		if _, ok := keep[i]; !ok && !plan[i].Explicit {
			match(i, false)
		}
	}
	taken := map[string]bool{}
	for r := range used {
		taken[recorded[r].IfName] = true
	}
	for _, n := range recorded {
		if n.Default && !n.Pending {
			taken[n.IfName] = true // kept, matched or not
		}
	}
	for i, a := range plan {
		if _, ok := keep[i]; !ok && a.Explicit {
			taken[a.IfName] = true
		}
	}
	next := 0
	for i, a := range plan {
		if _, ok := keep[i]; ok || a.Default {
			continue
		}
		if !a.Explicit {
			for {
				name := p.cfg.Ifname(next)
				next++
				if !taken[name] {
					a.IfName, taken[name] = name, true
					break
				}
			}
		}
		add = append(add, a)
	}
	for r, n := range recorded {
		if !used[r] && (!n.Default || n.Pending) {
			remove = append(remove, r)
		}
	}
	return keep, add, remove
}
