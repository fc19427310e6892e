package state

// Prepared-claim records compared with what the kubelet holds. The kubelet
// prepares a claim once and checkpoints it: it does not ask the driver again
// for the pod's next sandbox (only after its own restart). A record lost in
// between (an empty file after a power loss, a wiped state dir) would let
// the pod's sandbox start without the claim's network, unnoticed. So the
// claims the kubelet holds as prepared by nri-cni.io are given here
// (Reconcile, from its checkpoint: kube/dra/checkpoint.go); those without a
// readable record are kept as missing, and ForPod hands a stand-in for each
// to planning, which refuses it with the reason. A record written for the
// claim (the driver rebuilt it, or the kubelet prepared it again) or its
// unprepare ends that.

import (
	"fmt"
	"slices"
	"sort"
)

// HeldClaim is a claim the kubelet holds as prepared by nri-cni.io on this
// node, for its pods, with the devices the driver returned.
type HeldClaim struct {
	UID, Namespace, Name string
	Pods                 []string
	Devices              []HeldDevice
}

// HeldDevice is one device of a HeldClaim.
type HeldDevice struct {
	Requests     []string
	Pool, Device string
}

// MissingClaim is a HeldClaim without a readable record, and why.
type MissingClaim struct {
	HeldClaim
	Reason string
}

// String is "namespace/name".
func (m MissingClaim) String() string { return m.Namespace + "/" + m.Name }

// Reconcile compares the records with held, the claims the kubelet holds as
// prepared by nri-cni.io (all of them: what is not listed is not held). It
// returns those without a readable record, by namespace/name, which ForPod
// stands in for from now on; claims no longer held are forgotten. A claim
// with a record is never missing, whatever the order of a prepare and the
// checkpoint read that leads here; nor is one unprepared here (Delete),
// which the kubelet's checkpoint lists until the kubelet has written it
// again.
func (c *Claims) Reconcile(held []HeldClaim) []MissingClaim {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unjudged, c.judged, c.attached = "", true, nil // judged: the attachment records are not needed again
	missing := map[string]MissingClaim{}
	stillHeld := map[string]bool{}
	for _, h := range held {
		stillHeld[h.UID] = true
		if _, ok := c.byUID[h.UID]; ok || c.released[h.UID] || ValidID(h.UID) != nil {
			continue
		}
		missing[h.UID] = MissingClaim{HeldClaim: h, Reason: c.lost(h.UID)}
	}
	c.missing = missing
	for uid := range c.released {
		if !stillHeld[uid] {
			delete(c.released, uid)
		}
	}
	return c.missingLocked()
}

// Missing returns the claims Reconcile found without a readable record and
// that have none yet, by namespace/name.
func (c *Claims) Missing() []MissingClaim {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.missingLocked()
}

func (c *Claims) missingLocked() []MissingClaim {
	out := make([]MissingClaim, 0, len(c.missing))
	for _, m := range c.missing {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Stale returns the records of claims the kubelet does not hold (held as
// for Reconcile), by namespace/name: the kubelet will not unprepare them.
func (c *Claims) Stale(held []HeldClaim) []PreparedClaim {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []PreparedClaim
	for uid, pc := range c.byUID {
		if !slices.ContainsFunc(held, func(h HeldClaim) bool { return h.UID == uid }) {
			out = append(out, *pc)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}

// lost says why the claim of uid has no readable record (c.mu held).
func (c *Claims) lost(uid string) string {
	if err, ok := c.unreadable[uid]; ok {
		return fmt.Sprintf("its prepared-claim record is unreadable (%v)", err)
	}
	p, _ := c.path(uid)
	return fmt.Sprintf("its prepared-claim record %s is missing", p)
}

// missingFor: a stand-in for each missing claim of the pod (c.mu held).
func (c *Claims) missingFor(podUID string) []ClaimDevice {
	var out []ClaimDevice
	for _, m := range c.missingLocked() {
		if slices.Contains(m.Pods, podUID) {
			out = append(out, standIn(m, ""))
		}
	}
	return out
}

// standIn is the stand-in of a claim without a readable record, naming
// the claim and its first device; unjudged says why the kubelet's
// checkpoint cannot be read, if that is why it stands in.
func standIn(m MissingClaim, unjudged string) ClaimDevice {
	ref := ClaimRef{Namespace: m.Namespace, Name: m.Name, UID: m.UID, Driver: nriCNIDriver}
	if len(m.Devices) > 0 {
		d := m.Devices[0]
		ref.Pool, ref.Device = d.Pool, d.Device
		if len(d.Requests) > 0 {
			ref.Request = d.Requests[0]
		}
	}
	return ClaimDevice{Ref: ref, Unrecorded: m.Reason, Unjudged: unjudged}
}

// nriCNIDriver is the DRA driver whose claims are recorded here.
const nriCNIDriver = "nri-cni.io"
