package plan

import "github.com/nri-cni/nri-cni/state"

// diff is Diff with nri.conf's interface naming (ifname: the n-th name).
func diff(recorded []state.Network, plan []Attachment, ifname func(int) string) (keep map[int]int, add []Attachment, remove []int) {
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
				name := ifname(next)
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
