package dra

// The inventory: which networks this node publishes as devices, and under
// which names. Pure but for the check it is given: candidates in, devices
// out. Tenant input (NADs) is bounded here: every device fits the API's
// limits (names.go) or is left out; no two share a name or a network
// attribute; node networks (the admin's) come first; the NADs share the
// device budget fairly among their namespaces (max-min: the next device goes
// to the namespace with the fewest, each namespace at most MaxPerNamespace),
// so no namespace decides whether another's networks are published; and a
// namespace's NADs cost at most ChecksPerNamespace checks per build, their
// answers remembered (Verdicts).

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/big"
	"net/netip"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/cni"
)

// Device attributes (in the driver's domain: nri-cni.io/<name> in CEL).
// Every device has every one of them, so a selector need not guard them.
const (
	AttrNetwork    = "network"    // "name" (a node network) or "namespace/name" (a NAD); NetworkAttr when longer than 64 bytes
	AttrSource     = "source"     // "node" or "nad"
	AttrNamespace  = "namespace"  // a NAD's namespace; "" for a node network
	AttrShared     = "shared"     // true: claims of every namespace may get it (node networks, NADs of sharedNamespaces)
	AttrType       = "type"       // the first plugin's type (the interface's maker)
	AttrCNIVersion = "cniVersion" // the config's CNI version (a version attribute); 0.0.0 when not a semantic version
	SourceNode     = "node"
	SourceNAD      = "nad"
	// unknownVersion is the cniVersion of a config whose version is not
	// a semantic version (the attribute must be one).
	unknownVersion = "0.0.0"
)

// Why a network was left out (Skip.Class): the label of the
// nri_cni_dra_unpublished metric.
const (
	SkipRefused        = "refused"         // refused already: the NAD policy, its config, an unknown node network
	SkipAPILimits      = "api-limits"      // a device of it would break the API's limits
	SkipDuplicate      = "duplicate"       // its device name or network attribute is another network's
	SkipNamespaceShare = "namespace-share" // its namespace has kubernetes.dra.maxDevicesPerNamespace devices
	SkipMaxDevices     = "max-devices"     // kubernetes.dra.maxDevices reached
	SkipNoAddresses    = "no-addresses"    // its host-local ranges hold no address
	SkipCannotAttach   = "cannot-attach"   // a check failed on this node
	SkipPending        = "check-pending"   // not checked yet (ChecksPerNamespace)
)

// SkipClasses are every Skip.Class, sorted.
var SkipClasses = []string{SkipAPILimits, SkipCannotAttach, SkipPending, SkipDuplicate, SkipMaxDevices,
	SkipNamespaceShare, SkipNoAddresses, SkipRefused}

// TenantFixable reports whether a skip of this class is the same on every
// node and for the NAD's owner to act on (a Warning Event on the NAD): not
// a node's failed check, not a refusal the NAD's pods are told about.
func TenantFixable(class string) bool {
	switch class {
	case SkipAPILimits, SkipDuplicate, SkipNamespaceShare, SkipMaxDevices:
		return true
	}
	return false
}

// DefaultChecksPerNamespace bounds the checks one namespace's NADs cost per
// build when InventoryOptions.ChecksPerNamespace is 0.
const DefaultChecksPerNamespace = 32

// Candidate is a network the node might publish.
type Candidate struct {
	// Network is the network: a config dir network's name, or a
	// NetworkAttachmentDefinition's "namespace/name".
	Network string
	// Namespace is the NAD's namespace ("" for a node network).
	Namespace string
	// Shared: a NAD of kubernetes.sharedNamespaces (claims of every
	// namespace may get it; node networks always are).
	Shared bool
	// Net is what the device attaches (for a NAD with an empty
	// spec.config, the config dir network of its name).
	Net *cni.Network
	// Local: Net is a config dir network (the readiness reconciler asks
	// it for STATUS).
	Local bool
	// Err: the candidate is refused already (a NAD the policy refuses).
	Err error
}

// Skip is a candidate left out, and why.
type Skip struct {
	Network string
	// Namespace is the NAD's ("" for a node network).
	Namespace string
	// Class is one of SkipClasses; Reason says it in words.
	Class  string
	Reason string
}

// InventoryOptions shape the devices.
type InventoryOptions struct {
	// Multiple: one device per network that allows multiple allocations
	// (KEP-5075); else Slots devices per network (fewer when its
	// host-local ranges hold fewer addresses), one claim each.
	Multiple bool
	Slots    int
	// MaxDevices bounds the devices; MaxPerNamespace (0: MaxDevices) the
	// devices of one namespace's NADs.
	MaxDevices      int
	MaxPerNamespace int
	// ChecksPerNamespace bounds the checks of one namespace's NADs per
	// build (0: DefaultChecksPerNamespace); the rest keep their last answer
	// or wait for a later build. Node networks are always checked.
	ChecksPerNamespace int
	// Seed (the node's name) orders namespaces that tie when the budget
	// runs out, so that different nodes leave out different ones.
	Seed string
	// Verdicts, when set, remembers the NADs' check answers between builds.
	Verdicts *Verdicts
}

// Inventory is what the node publishes.
type Inventory struct {
	// Devices: the node networks' in the candidates' order, then the
	// NADs' by network.
	Devices []resourceapi.Device
	// Networks maps each device's name, each network's base device name
	// and its name before issue 28 (legacyDeviceName, for claims allocated
	// before an upgrade) to the network.
	Networks map[string]string
	// DeviceNetwork maps each device to its network (Networks without the
	// base and legacy names): what publishing groups devices by.
	DeviceNetwork map[string]string
	Skipped       []Skip
}

// prepared is a candidate with what its devices would be.
type prepared struct {
	c      Candidate
	base   string // DeviceName
	attrs  map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	n      int    // devices
	skip   string // class, when left out before any budget
	reason string
}

// nsQueue is one namespace's NADs, in network order, as the fair share
// hands them out.
type nsQueue struct {
	ns      string
	rank    uint64
	items   []*prepared
	next    int
	devices int
	checks  int
}

// BuildInventory turns the candidates that pass check (nil: the network
// can attach here) into devices: node networks first, in order, then the
// NADs, fairly among their namespaces, within MaxDevices.
func BuildInventory(cands []Candidate, check func(Candidate) error, o InventoryOptions) Inventory {
	b := &builder{o: o, check: check, inv: Inventory{Networks: map[string]string{}, DeviceNetwork: map[string]string{}}}
	if b.o.MaxPerNamespace <= 0 || b.o.MaxPerNamespace > b.o.MaxDevices {
		b.o.MaxPerNamespace = b.o.MaxDevices
	}
	if b.o.ChecksPerNamespace <= 0 {
		b.o.ChecksPerNamespace = DefaultChecksPerNamespace
	}
	var node, nads []*prepared
	for _, c := range cands {
		p := b.prepare(c)
		if c.Namespace == "" {
			node = append(node, p)
		} else {
			nads = append(nads, p)
		}
	}
	sort.SliceStable(nads, func(i, j int) bool { return nads[i].c.Network < nads[j].c.Network })
	// Duplicates in a fixed order (node networks, then NADs by name), so
	// every node keeps the same one of two, whatever the budget does.
	b.dedupe(append(append([]*prepared(nil), node...), nads...))
	var accepted []*prepared
	for _, p := range node {
		if b.consider(p, nil) {
			accepted = append(accepted, p)
		}
	}
	accepted = append(accepted, b.fair(nads)...)
	if b.o.Verdicts != nil {
		b.o.Verdicts.sweep(b.seen)
	}
	b.emit(accepted)
	return b.inv
}

type builder struct {
	o     InventoryOptions
	check func(Candidate) error
	inv   Inventory
	total int
	seen  map[string]bool // verdict keys used
}

func (b *builder) skip(p *prepared, class, reason string) {
	b.inv.Skipped = append(b.inv.Skipped, Skip{Network: p.c.Network, Namespace: p.c.Namespace, Class: class, Reason: reason})
}

// prepare computes a candidate's devices and what keeps them out before
// any budget: a refusal, the API's limits, an empty address pool.
func (b *builder) prepare(c Candidate) *prepared {
	p := &prepared{c: c}
	if c.Err != nil {
		p.skip, p.reason = SkipRefused, c.Err.Error()
		return p
	}
	p.n = 1
	if !b.o.Multiple {
		p.n = min(b.o.Slots, PoolSize(c.Net), maxSliceDevices)
	}
	if p.n <= 0 {
		p.skip, p.reason = SkipNoAddresses, "its host-local ranges hold no address"
		return p
	}
	p.base, p.attrs = DeviceName(c.Network), attributes(c)
	last := resourceapi.Device{Name: p.base, Attributes: p.attrs}
	if !b.o.Multiple {
		last.Name = fmt.Sprintf("%s-%d", p.base, p.n-1)
	}
	if err := validDevice(last); err != nil {
		p.skip, p.reason = SkipAPILimits, "cannot be a DRA device: "+err.Error()
	}
	return p
}

// dedupe leaves out the later of two networks with one device name or one
// network attribute (a hash collision, or two names NetworkAttr shortens
// alike): the API server would refuse the slice, or a selector could not
// tell them apart.
func (b *builder) dedupe(all []*prepared) {
	names, attrs := map[string]string{}, map[string]string{}
	for _, p := range all {
		if p.skip != "" {
			continue
		}
		attr := *p.attrs[AttrNetwork].StringValue
		if other, ok := names[p.base]; ok {
			p.skip, p.reason = SkipDuplicate, fmt.Sprintf("its device name %s is that of network %s, which is published instead", p.base, other)
			continue
		}
		if other, ok := attrs[attr]; ok {
			p.skip, p.reason = SkipDuplicate, fmt.Sprintf("its network attribute %q is that of network %s, which is published instead", attr, other)
			continue
		}
		names[p.base], attrs[attr] = p.c.Network, p.c.Network
	}
}

// fair hands the budget to the NADs' namespaces: the next network always
// goes to the namespace with the fewest devices so far (ties: by rank),
// each in network order, at most MaxPerNamespace each.
func (b *builder) fair(nads []*prepared) []*prepared {
	byNS := map[string]*nsQueue{}
	var queues []*nsQueue
	for _, p := range nads {
		q := byNS[p.c.Namespace]
		if q == nil {
			h := fnv.New64a()
			_, _ = h.Write([]byte(b.o.Seed + "/" + p.c.Namespace))
			q = &nsQueue{ns: p.c.Namespace, rank: h.Sum64()}
			byNS[p.c.Namespace] = q
			queues = append(queues, q)
		}
		q.items = append(q.items, p)
	}
	var accepted []*prepared
	for len(queues) > 0 {
		// The namespace with the fewest devices; namespaces are few
		// next to their NADs, so a scan is enough.
		best := 0
		for i, q := range queues[1:] {
			if q.devices < queues[best].devices || q.devices == queues[best].devices &&
				(q.rank < queues[best].rank || q.rank == queues[best].rank && q.ns < queues[best].ns) {
				best = i + 1
			}
		}
		q := queues[best]
		p := q.items[q.next]
		q.next++
		if b.consider(p, q) {
			accepted = append(accepted, p)
		}
		if q.next == len(q.items) {
			queues = append(queues[:best], queues[best+1:]...)
		}
	}
	return accepted
}

// consider decides one network (q: its namespace's queue, nil for a node
// network): true when it is published.
func (b *builder) consider(p *prepared, q *nsQueue) bool {
	if p.skip != "" {
		b.skip(p, p.skip, p.reason)
		return false
	}
	// The bounds first: a tenant's thousand NADs cost a count, not a
	// thousand checks.
	if q != nil && q.devices+p.n > b.o.MaxPerNamespace {
		b.skip(p, SkipNamespaceShare, fmt.Sprintf("namespace %s has its share of this node's devices: "+
			"kubernetes.dra.maxDevicesPerNamespace (%d)", p.c.Namespace, b.o.MaxPerNamespace))
		return false
	}
	if b.total+p.n > b.o.MaxDevices {
		b.skip(p, SkipMaxDevices, fmt.Sprintf("kubernetes.dra.maxDevices (%d) reached", b.o.MaxDevices))
		return false
	}
	if err, ok := b.verdict(p, q); !ok {
		b.skip(p, SkipPending, fmt.Sprintf("not checked yet: a namespace's NADs get at most %d checks per refresh", b.o.ChecksPerNamespace))
		return false
	} else if err != nil {
		b.skip(p, SkipCannotAttach, err.Error())
		return false
	}
	b.total += p.n
	if q != nil {
		q.devices += p.n
	}
	return true
}

// verdict is check's answer for p: asked now (a node network always; a
// NAD within its namespace's checks and when Verdicts has no fresh one),
// or remembered; ok false when there is none yet.
func (b *builder) verdict(p *prepared, q *nsQueue) (err error, ok bool) {
	if q == nil {
		return b.check(p.c), true
	}
	v := b.o.Verdicts
	key := ""
	if v != nil {
		key = v.key(p.c)
		if b.seen == nil {
			b.seen = map[string]bool{}
		}
		b.seen[key] = true
		last, known, fresh := v.lookup(key)
		if fresh || known && q.checks >= b.o.ChecksPerNamespace {
			return last, true
		}
	}
	if q.checks >= b.o.ChecksPerNamespace {
		return nil, false
	}
	q.checks++
	err = b.check(p.c)
	if v != nil {
		v.store(key, err)
	}
	return err, true
}

// emit writes the accepted networks' devices (node networks, then NADs by
// network) and the names they resolve by.
func (b *builder) emit(accepted []*prepared) {
	sort.SliceStable(accepted, func(i, j int) bool {
		ni, nj := accepted[i].c.Namespace == "", accepted[j].c.Namespace == ""
		if ni || nj {
			return ni && !nj // node networks first, in their order
		}
		return accepted[i].c.Network < accepted[j].c.Network
	})
	for _, p := range accepted {
		// The base name resolves too: a slot of it allocated before a
		// switch to multiple allocations, or the reverse.
		b.inv.Networks[p.base] = p.c.Network
		for i := range p.n {
			d := resourceapi.Device{Name: p.base, Attributes: p.attrs}
			if b.o.Multiple {
				d.AllowMultipleAllocations = ptr.To(true)
			} else {
				d.Name = fmt.Sprintf("%s-%d", p.base, i)
			}
			b.inv.Devices = append(b.inv.Devices, d)
			b.inv.Networks[d.Name] = p.c.Network
			b.inv.DeviceNetwork[d.Name] = p.c.Network
		}
	}
	// Names of before issue 28, for claims allocated before an upgrade:
	// only where unambiguous.
	legacy := map[string]string{}
	for _, p := range accepted {
		name := legacyDeviceName(p.c.Network)
		if _, taken := b.inv.Networks[name]; taken {
			continue
		}
		if other, dup := legacy[name]; dup && other != p.c.Network {
			legacy[name] = ""
			continue
		}
		legacy[name] = p.c.Network
	}
	for name, network := range legacy {
		if network != "" {
			b.inv.Networks[name] = network
		}
	}
}

func attributes(c Candidate) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	source, typ, version := SourceNode, "", unknownVersion
	if c.Namespace != "" {
		source = SourceNAD
	}
	if c.Net != nil && c.Net.List != nil {
		l := c.Net.List
		if len(l.Plugins) > 0 {
			typ = l.Plugins[0].Network.Type
		}
		if len(l.CNIVersion) <= maxAttrValueLen && semverRe.MatchString(l.CNIVersion) {
			version = l.CNIVersion
		}
	}
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrNetwork:    {StringValue: ptr.To(NetworkAttr(c.Network))},
		AttrSource:     {StringValue: ptr.To(source)},
		AttrNamespace:  {StringValue: ptr.To(c.Namespace)},
		AttrShared:     {BoolValue: ptr.To(c.Namespace == "" || c.Shared)},
		AttrType:       {StringValue: ptr.To(typ)},
		AttrCNIVersion: {VersionValue: ptr.To(version)},
	}
}

// unknownPool is the pool size of IPAM nri-cni cannot size (not
// host-local): no bound from the addresses.
const unknownPool = 1 << 30

// PoolSize is how many addresses the network's host-local IPAM can hand
// out (the smallest range set: each ADD takes one address from every set),
// or a large number when it is not host-local or not readable.
func PoolSize(n *cni.Network) int {
	if n == nil || n.List == nil || len(n.List.Plugins) == 0 {
		return unknownPool
	}
	var conf struct {
		IPAM struct {
			Type   string `json:"type"`
			Subnet string `json:"subnet"`
			Ranges [][]struct {
				Subnet     string `json:"subnet"`
				RangeStart string `json:"rangeStart"`
				RangeEnd   string `json:"rangeEnd"`
			} `json:"ranges"`
		} `json:"ipam"`
	}
	if json.Unmarshal(n.List.Plugins[0].Bytes, &conf) != nil || conf.IPAM.Type != "host-local" {
		return unknownPool
	}
	sets := conf.IPAM.Ranges
	if len(sets) == 0 && conf.IPAM.Subnet != "" {
		sets = append(sets, []struct {
			Subnet     string `json:"subnet"`
			RangeStart string `json:"rangeStart"`
			RangeEnd   string `json:"rangeEnd"`
		}{{Subnet: conf.IPAM.Subnet}})
	}
	size := unknownPool
	for _, set := range sets {
		total := 0
		for _, r := range set {
			total += rangeSize(r.Subnet, r.RangeStart, r.RangeEnd)
		}
		size = min(size, total)
	}
	return max(size, 0)
}

// rangeSize counts the usable addresses of one host-local range: the
// subnet without its network address, broadcast (IPv4) and gateway (its
// first host), narrowed by rangeStart/rangeEnd.
func rangeSize(subnet, start, end string) int {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return 0
	}
	p = p.Masked()
	bits := p.Addr().BitLen() - p.Bits()
	if bits > 30 {
		return unknownPool
	}
	first := new(big.Int).SetBytes(p.Addr().AsSlice())
	last := new(big.Int).Add(first, new(big.Int).Lsh(big.NewInt(1), uint(bits)))
	last.Sub(last, big.NewInt(1))
	lo := new(big.Int).Add(first, big.NewInt(2)) // skip the network address and the gateway
	hi := new(big.Int).Set(last)
	if p.Addr().Is4() {
		hi.Sub(hi, big.NewInt(1)) // broadcast
	}
	if a, err := netip.ParseAddr(start); err == nil && p.Contains(a) {
		lo = new(big.Int).SetBytes(a.AsSlice())
	}
	if a, err := netip.ParseAddr(end); err == nil && p.Contains(a) {
		hi = new(big.Int).SetBytes(a.AsSlice())
	}
	n := new(big.Int).Sub(hi, lo)
	n.Add(n, big.NewInt(1))
	if n.Sign() <= 0 {
		return 0
	}
	return int(n.Int64())
}
