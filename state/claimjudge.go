package state

// Prepared-claim records while the kubelet's DRA checkpoint cannot be read
// (an unknown format or version, a bad checksum, the file missing or
// closed to nri-cni). Without it nri-cni cannot tell which claims the
// kubelet holds as prepared (claimcheck.go), so a lost record could let a
// pod's next sandbox start without the claim's network. What nri-cni does
// know decides which pods are held back (ForPod's stand-ins carry
// ClaimDevice.Unjudged; planning refuses them):
//
//  0. claims found missing at the last read that worked stay missing;
//
//     if the checkpoint has not been read since the records were opened
//     (nri-cni started), nothing is judged, and:
//
//  1. a pod that nri-cni's attachment records (read at open) list — it
//     attached an earlier sandbox of the pod — had exactly the claims
//     those records name (a pod's claims never change, and every attach
//     plans every claim recorded for it). One of them without a readable
//     record now is lost: the pod is held back, naming the claim (and the
//     driver rebuilds the record from the claim where it may);
//  2. an unreadable record (its file is there, so its claim UID is known)
//     that no attachment record names belongs to a pod nri-cni has not
//     attached before, which could be any such pod: while there is one,
//     every pod that the attachment records do not list is held back (a
//     pod they list is judged by rule 1). It ends when the record is
//     replaced (the kubelet prepares the claim again, as it does after its
//     own restart), removed (the kubelet unprepares it) or judged (the
//     checkpoint is read).
//
// Pods the attachment records list whose claims all have records, and
// every pod while no record is unreadable, are not held: a checkpoint
// format nri-cni does not know alone holds back no pod. A record missing
// altogether (a wiped claims directory) of a pod without an attachment
// record cannot be seen without the checkpoint (docs/dra.md says so).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// CannotJudge tells the records that the kubelet's checkpoint could not be
// read now: why (its error, naming the file). Reconcile, after a read that
// worked, ends it.
func (c *Claims) CannotJudge(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unjudged = why
}

// Unjudged is what the records hold back while the kubelet's checkpoint
// cannot be read.
type Unjudged struct {
	// Why it cannot be read; empty when it was at the last try.
	Why string
	// Judged: it was read since the records were opened. Then only the
	// claims found missing at that read stay held back (Missing).
	Judged bool
	// Lost: claims that attachment records name for a pod, without a
	// readable record (rule 1), by namespace/name.
	Lost []MissingClaim
	// Unplaced: the claim UIDs of unreadable records that no attachment
	// record names (rule 2): while there is one, every pod nri-cni has not
	// attached before is held back.
	Unplaced []string
}

// Unjudged returns what is held back now because the kubelet's checkpoint
// cannot be read (zero Lost and Unplaced when it can, or was read since
// the records were opened).
func (c *Claims) Unjudged() Unjudged {
	c.mu.RLock()
	defer c.mu.RUnlock()
	u := Unjudged{Why: c.unjudged, Judged: c.judged}
	if !c.blind() {
		return u
	}
	pods := make([]string, 0, len(c.attached))
	for pod := range c.attached {
		pods = append(pods, pod)
	}
	sort.Strings(pods)
	for _, pod := range pods {
		u.Lost = append(u.Lost, c.lostOf(pod)...)
	}
	sort.Slice(u.Lost, func(i, j int) bool { return u.Lost[i].String() < u.Lost[j].String() })
	u.Unplaced = c.unplaced()
	return u
}

// blind: the checkpoint cannot be read and was not read since open
// (c.mu held).
func (c *Claims) blind() bool { return c.unjudged != "" && !c.judged }

// unjudgedFor: the stand-ins of rules 1 and 2 for the pod (c.mu held).
func (c *Claims) unjudgedFor(podUID string) []ClaimDevice {
	if !c.blind() {
		return nil
	}
	var out []ClaimDevice
	if _, known := c.attached[podUID]; known {
		for _, m := range c.lostOf(podUID) {
			out = append(out, standIn(m, c.unjudged))
		}
		return out
	}
	unplaced := c.unplaced()
	if len(unplaced) == 0 {
		return nil
	}
	why := c.lost(unplaced[0]) + ", and no attachment record names its pod: it may be this one, which nri-cni has not attached before"
	if n := len(unplaced) - 1; n > 0 {
		why += fmt.Sprintf(" (and %d more such records)", n)
	}
	m := MissingClaim{HeldClaim: HeldClaim{UID: unplaced[0]}, Reason: why}
	return []ClaimDevice{standIn(m, c.unjudged)}
}

// lostOf: the claims the attachment records name for pod without a
// readable record, that are neither unprepared here nor missing already
// (missingFor stands in for those), by namespace/name (c.mu held).
func (c *Claims) lostOf(pod string) []MissingClaim {
	byUID := map[string]*MissingClaim{}
	var out []*MissingClaim
	for _, ref := range c.attached[pod] {
		if _, ok := c.byUID[ref.UID]; ok || c.released[ref.UID] {
			continue
		}
		if _, ok := c.missing[ref.UID]; ok {
			continue
		}
		m := byUID[ref.UID]
		if m == nil {
			m = &MissingClaim{HeldClaim: HeldClaim{UID: ref.UID, Namespace: ref.Namespace, Name: ref.Name, Pods: []string{pod}},
				Reason: c.lost(ref.UID) + "; an earlier sandbox of the pod had its network (nri-cni's attachment records)"}
			byUID[ref.UID] = m
			out = append(out, m)
		}
		d := HeldDevice{Pool: ref.Pool, Device: ref.Device}
		if ref.Request != "" {
			d.Requests = []string{ref.Request}
		}
		if !slices.ContainsFunc(m.Devices, func(h HeldDevice) bool { return h.Pool == d.Pool && h.Device == d.Device }) {
			m.Devices = append(m.Devices, d)
		}
	}
	res := make([]MissingClaim, 0, len(out))
	for _, m := range out {
		res = append(res, *m)
	}
	sort.Slice(res, func(i, j int) bool { return res[i].String() < res[j].String() })
	return res
}

// unplaced: the claim UIDs of unreadable records that no attachment record
// names, sorted (c.mu held).
func (c *Claims) unplaced() []string {
	if len(c.unreadable) == 0 {
		return nil
	}
	named := map[string]bool{}
	for _, refs := range c.attached {
		for _, r := range refs {
			named[r.UID] = true
		}
	}
	var out []string
	for uid := range c.unreadable {
		if !named[uid] {
			out = append(out, uid)
		}
	}
	sort.Strings(out)
	return out
}

// attachedClaims reads the attachment records in stateDir: for each pod
// sandbox's pod UID, the DRA claims of nri-cni.io its networks came from
// (none: the pod had no claim). Unreadable records are the engine's to
// report; their pods are not listed.
func attachedClaims(stateDir string) map[string][]ClaimRef {
	recs, _ := (&Store{dir: stateDir}).List()
	out := map[string][]ClaimRef{}
	for _, r := range recs {
		if r.Kind != "pod" || r.UID == "" {
			continue
		}
		refs := out[r.UID]
		for _, n := range r.Networks {
			if n.Claim != nil && n.Claim.Driver == nriCNIDriver && ValidID(n.Claim.UID) == nil {
				refs = append(refs, *n.Claim)
			}
		}
		out[r.UID] = refs
	}
	return out
}

// CheckpointReport is the running nri-cni's last word on the kubelet's DRA
// checkpoint and the claims held back for it, for `nri-cni status`.
type CheckpointReport struct {
	// Since: when this became the report.
	Since    time.Time `json:"since"`
	Path     string    `json:"path"`
	Readable bool      `json:"readable"`
	// Reason is the class of the error (kube/dra.CheckpointReason), Error
	// the error.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// HeldBack: the claims whose pods fail closed, "namespace/name (uid
	// U): why".
	HeldBack []string `json:"heldBack,omitempty"`
	// Unplaced: the claim UIDs of unreadable records no attachment record
	// names; while there is one, pods nri-cni has not attached before fail
	// closed.
	Unplaced []string `json:"unplaced,omitempty"`
}

// Same reports whether r says what o says (Since aside).
func (r CheckpointReport) Same(o CheckpointReport) bool {
	r.Since, o.Since = time.Time{}, time.Time{}
	return r.Path == o.Path && r.Readable == o.Readable && r.Reason == o.Reason && r.Error == o.Error &&
		slices.Equal(r.HeldBack, o.HeldBack) && slices.Equal(r.Unplaced, o.Unplaced)
}

// checkpointReportFile holds the report in the claims directory (hidden:
// not a record).
const checkpointReportFile = ".kubelet-checkpoint"

// SaveReport writes r for `nri-cni status` (atomically).
func (c *Claims) SaveReport(r CheckpointReport) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.dir, checkpointReportFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("saving the DRA checkpoint report: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if err := write(tmp, data); err != nil {
		return fmt.Errorf("saving the DRA checkpoint report: %w", err)
	}
	return os.Rename(tmp.Name(), filepath.Join(c.dir, checkpointReportFile))
}

// ReadCheckpointReport reads the running nri-cni's last report in
// stateDir (os.ErrNotExist: none, e.g. its DRA driver is off).
func ReadCheckpointReport(stateDir string) (CheckpointReport, error) {
	p := filepath.Join(stateDir, "claims", checkpointReportFile)
	var r CheckpointReport
	data, err := os.ReadFile(p)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", p, err)
	}
	return r, nil
}
