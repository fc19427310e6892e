package state

// Prepared DRA claims: what the kubelet asked the DRA driver to prepare,
// kept until it asks to unprepare. One file per claim (named by its UID) in
// the claims/ subdirectory, written atomically; an in-memory index by pod
// UID serves the attach path (no file read there). The kubelet prepares a
// claim before it runs the pod's sandbox, so the sandbox finds its claims
// here; a restarted nri-cni reads them back.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// ClaimRef identifies the claim device an attachment was asked for by: the
// claim, the request, and the allocated device (driver, pool, device, share)
// whose status.devices entry reports it.
type ClaimRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Request   string `json:"request"`
	Driver    string `json:"driver"`
	Pool      string `json:"pool"`
	Device    string `json:"device"`
	// ShareID is the allocation's share of a device that allows multiple
	// allocations (KEP-5075); empty otherwise.
	ShareID string `json:"shareID,omitempty"`
}

// String is "namespace/name".
func (r ClaimRef) String() string { return r.Namespace + "/" + r.Name }

// Where names the claim's request in errors.
func (r ClaimRef) Where() string {
	return fmt.Sprintf("ResourceClaim %s request %q (device %s)", r, r.Request, r.Device)
}

// ClaimConfig is one opaque config (driver nri-cni.io) of a claim's
// allocation that applies to a request: the admin's (FromClass, on the
// DeviceClass) or the claim's own.
type ClaimConfig struct {
	FromClass bool            `json:"fromClass,omitempty"`
	Raw       json.RawMessage `json:"raw"`
}

// ClaimDevice is one allocated device of a prepared claim: a network.
type ClaimDevice struct {
	Ref ClaimRef `json:"ref"`
	// Network is the device's network: a config dir network's name, or a
	// NetworkAttachmentDefinition's "namespace/name".
	Network string        `json:"network"`
	Configs []ClaimConfig `json:"configs,omitempty"`
	// Unrecorded, never stored, marks a stand-in (ForPod) for a claim the
	// kubelet holds as prepared by nri-cni.io of which no readable record
	// exists: why. Ref names the claim and one of its devices; Network and
	// Configs are unknown. Planning refuses it: the pod must not start
	// without the claim's network.
	Unrecorded string `json:"-"`
	// Unjudged, with Unrecorded, marks a stand-in for a claim that may be
	// lost while the kubelet's checkpoint cannot be read (claimjudge.go):
	// why it cannot. Ref.Namespace is empty when not even the claim's pod
	// is known (an unreadable record nothing else names).
	Unjudged string `json:"-"`
}

// PreparedClaim is a claim the kubelet prepared on this node.
type PreparedClaim struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are the UIDs of the pods the claim was reserved for.
	Pods     []string      `json:"pods"`
	Devices  []ClaimDevice `json:"devices"`
	Prepared time.Time     `json:"prepared"`
}

// maxReleased bounds Claims.released when nothing prunes it (the kubelet's
// checkpoint unreadable).
const maxReleased = 4096

// Claims is the store of prepared claims. Safe for concurrent use.
type Claims struct {
	dir    string
	mu     sync.RWMutex              // guards byUID, byPod, unreadable, missing
	byUID  map[string]*PreparedClaim // claim UID -> claim
	byPod  map[string][]string       // pod UID -> claim UIDs
	loadEr []error
	// unreadable: claim UID -> why its file could not be read at open.
	unreadable map[string]error
	// missing: claims the kubelet holds as prepared with no record
	// (Reconcile, claimcheck.go), by claim UID.
	missing map[string]MissingClaim
	// released: claims unprepared (Delete) that the kubelet's checkpoint
	// may still list for a moment; never missing (claimcheck.go).
	released map[string]bool
	// What holds back pods while the kubelet's checkpoint cannot be read
	// (claimjudge.go): why not (empty: it was read at the last try),
	// whether it was ever read since open, and the claims of each pod
	// that the attachment records named at open (dropped once judged).
	unjudged string
	judged   bool
	attached map[string][]ClaimRef
}

// OpenClaims opens (creating it, 0700) the claims directory under the
// state dir and reads every claim in it. Unreadable files are reported by
// LoadErrors and left in place.
func OpenClaims(stateDir string) (*Claims, error) {
	dir := filepath.Join(stateDir, "claims")
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("claims dir: %w", err)
	}
	c := &Claims{dir: dir, byUID: map[string]*PreparedClaim{}, byPod: map[string][]string{},
		unreadable: map[string]error{}, missing: map[string]MissingClaim{}, released: map[string]bool{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("claims dir: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, suffix) || strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		var pc PreparedClaim
		if err == nil {
			var body []byte
			if body, _, err = opened(bytes.TrimRight(data, "\n")); err == nil {
				err = json.Unmarshal(body, &pc)
			}
		}
		if err == nil && pc.UID+suffix != name {
			err = fmt.Errorf("holds claim UID %q", pc.UID)
		}
		if err != nil {
			err = fmt.Errorf("%w %s: %w", ErrCorrupt, p, err)
			c.loadEr = append(c.loadEr, err)
			if uid := strings.TrimSuffix(name, suffix); ValidID(uid) == nil {
				c.unreadable[uid] = err
			}
			continue
		}
		c.index(&pc)
	}
	c.attached = attachedClaims(stateDir)
	return c, nil
}

// LoadErrors are the claim files OpenClaims could not read.
func (c *Claims) LoadErrors() []error { return c.loadEr }

func (c *Claims) path(uid string) (string, error) {
	if err := ValidID(uid); err != nil {
		return "", fmt.Errorf("claim UID: %w", err)
	}
	return filepath.Join(c.dir, uid+suffix), nil
}

// index adds pc (c.mu held, or during open).
func (c *Claims) index(pc *PreparedClaim) {
	c.byUID[pc.UID] = pc
	for _, pod := range pc.Pods {
		if !slices.Contains(c.byPod[pod], pc.UID) {
			c.byPod[pod] = append(c.byPod[pod], pc.UID)
		}
	}
}

// unindex removes the claim of uid (c.mu held).
func (c *Claims) unindex(uid string) {
	old, ok := c.byUID[uid]
	if !ok {
		return
	}
	delete(c.byUID, uid)
	for _, pod := range old.Pods {
		left := slices.DeleteFunc(c.byPod[pod], func(u string) bool { return u == uid })
		if len(left) == 0 {
			delete(c.byPod, pod)
		} else {
			c.byPod[pod] = left
		}
	}
}

// Put records pc (replacing what was recorded for its UID): written to a
// temp file and renamed, then indexed.
func (c *Claims) Put(pc *PreparedClaim) error {
	p, err := c.path(pc.UID)
	if err != nil {
		return err
	}
	data, err := json.Marshal(pc)
	if err != nil {
		return fmt.Errorf("encoding claim %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	data = sealed(data)
	tmp, err := os.CreateTemp(c.dir, "."+pc.UID+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing claim %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if err := write(tmp, data); err != nil {
		return fmt.Errorf("writing claim %s: %w", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("writing claim %s: %w", p, err)
	}
	cp := *pc
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unindex(pc.UID)
	c.index(&cp)
	delete(c.unreadable, pc.UID)
	delete(c.missing, pc.UID)
	delete(c.released, pc.UID)
	return nil
}

// Delete forgets the claim of uid; an unknown claim is not an error.
func (c *Claims) Delete(uid string) error {
	p, err := c.path(uid)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting claim %s: %w", p, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unindex(uid)
	delete(c.unreadable, uid)
	delete(c.missing, uid)
	if len(c.released) >= maxReleased {
		clear(c.released) // Reconcile prunes them; without it, bound them
	}
	c.released[uid] = true
	return nil
}

// Get returns the claim of uid.
func (c *Claims) Get(uid string) (PreparedClaim, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	pc, ok := c.byUID[uid]
	if !ok {
		return PreparedClaim{}, false
	}
	return *pc, true
}

// ForPod returns the devices of the claims prepared for the pod of uid,
// ordered by claim (namespace/name), then as allocated; then a stand-in
// (ClaimDevice.Unrecorded) for each claim the kubelet holds as prepared for
// the pod of which there is no readable record, and, while the kubelet's
// checkpoint cannot be read, for each claim that may be the pod's and lost
// (claimjudge.go). Memory only.
func (c *Claims) ForPod(podUID string) []ClaimDevice {
	c.mu.RLock()
	defer c.mu.RUnlock()
	uids := c.byPod[podUID]
	claims := make([]*PreparedClaim, 0, len(uids))
	for _, u := range uids {
		claims = append(claims, c.byUID[u])
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].Name < claims[j].Name })
	var out []ClaimDevice
	for _, pc := range claims {
		out = append(out, pc.Devices...)
	}
	out = append(out, c.missingFor(podUID)...)
	return append(out, c.unjudgedFor(podUID)...)
}

// List returns every prepared claim, by namespace/name.
func (c *Claims) List() []PreparedClaim {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]PreparedClaim, 0, len(c.byUID))
	for _, pc := range c.byUID {
		out = append(out, *pc)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}
