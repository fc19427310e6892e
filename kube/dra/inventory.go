package dra

// The inventory: which networks this node publishes as devices, and under
// which names. Pure: candidates and a verdict in, devices out.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/cni"
)

// Device attributes (in the driver's domain: nri-cni.io/<name> in CEL).
const (
	AttrNetwork    = "network"    // "name" (a node network) or "namespace/name" (a NAD)
	AttrSource     = "source"     // "node" or "nad"
	AttrNamespace  = "namespace"  // a NAD's namespace
	AttrType       = "type"       // the first plugin's type (the interface's maker)
	AttrCNIVersion = "cniVersion" // the config's CNI version (a version attribute)
	SourceNode     = "node"
	SourceNAD      = "nad"
)

// Candidate is a network the node might publish.
type Candidate struct {
	// Network is the device's network attribute: a config dir network's
	// name, or a NetworkAttachmentDefinition's "namespace/name".
	Network string
	// Namespace is the NAD's namespace ("" for a node network).
	Namespace string
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
	Reason  string
}

// InventoryOptions shape the devices.
type InventoryOptions struct {
	// Multiple: one device per network that allows multiple allocations
	// (KEP-5075); else Slots devices per network (fewer when its
	// host-local ranges hold fewer addresses), one claim each.
	Multiple   bool
	Slots      int
	MaxDevices int
}

// Inventory is what the node publishes.
type Inventory struct {
	Devices []resourceapi.Device
	// Networks maps each device's name, and each network's base device
	// name, to its network attribute.
	Networks map[string]string
	Skipped  []Skip
}

// BuildInventory turns the candidates that pass check (nil: the network
// can attach here) into devices, in order, until MaxDevices.
func BuildInventory(cands []Candidate, check func(Candidate) error, o InventoryOptions) Inventory {
	inv := Inventory{Networks: map[string]string{}}
	for _, c := range cands {
		if c.Err != nil {
			inv.Skipped = append(inv.Skipped, Skip{Network: c.Network, Reason: c.Err.Error()})
			continue
		}
		n := 1
		if !o.Multiple {
			n = min(o.Slots, PoolSize(c.Net))
		}
		// The bound first: a tenant's thousand NADs cost a count, not a
		// thousand checks.
		if len(inv.Devices)+n > o.MaxDevices {
			inv.Skipped = append(inv.Skipped, Skip{Network: c.Network,
				Reason: fmt.Sprintf("kubernetes.dra.maxDevices (%d) reached", o.MaxDevices)})
			continue
		}
		if n == 0 {
			inv.Skipped = append(inv.Skipped, Skip{Network: c.Network, Reason: "its host-local ranges hold no address"})
			continue
		}
		if err := check(c); err != nil {
			inv.Skipped = append(inv.Skipped, Skip{Network: c.Network, Reason: err.Error()})
			continue
		}
		base := DeviceName(c.Network)
		attrs := attributes(c)
		// The base name resolves too: a slot of it allocated before a
		// switch to multiple allocations, or the reverse.
		inv.Networks[base] = c.Network
		for i := range n {
			d := resourceapi.Device{Name: base, Attributes: attrs}
			if o.Multiple {
				d.AllowMultipleAllocations = ptr.To(true)
			} else {
				d.Name = fmt.Sprintf("%s-%d", base, i)
			}
			inv.Devices = append(inv.Devices, d)
			inv.Networks[d.Name] = c.Network
		}
	}
	return inv
}

func attributes(c Candidate) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrNetwork: {StringValue: ptr.To(c.Network)},
		AttrSource:  {StringValue: ptr.To(SourceNode)},
	}
	if c.Namespace != "" {
		a[AttrSource] = resourceapi.DeviceAttribute{StringValue: ptr.To(SourceNAD)}
		a[AttrNamespace] = resourceapi.DeviceAttribute{StringValue: ptr.To(c.Namespace)}
	}
	if l := c.Net.List; l != nil {
		if len(l.Plugins) > 0 {
			a[AttrType] = resourceapi.DeviceAttribute{StringValue: ptr.To(l.Plugins[0].Network.Type)}
		}
		if _, err := version.ParseSemantic(l.CNIVersion); err == nil {
			a[AttrCNIVersion] = resourceapi.DeviceAttribute{VersionValue: ptr.To(l.CNIVersion)}
		}
	}
	return a
}

// maxBaseLen leaves room for a slot suffix ("-127") in a device name (a
// DNS label: at most 63 characters).
const maxBaseLen = 63 - 4

// DeviceName is the stable device name of a network: a readable prefix
// ("net-<name>" or "nad-<namespace>-<name>", lower-cased, other characters
// as '-') and 8 hex characters of the network attribute's SHA-256, so two
// networks never share one. The same network keeps its name across
// restarts, so allocations stay valid.
func DeviceName(network string) string {
	sum := sha256.Sum256([]byte(network))
	suffix := "-" + hex.EncodeToString(sum[:4])
	prefix := "net-"
	if strings.Contains(network, "/") {
		prefix = "nad-"
	}
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(network) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !ok {
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = true
			continue
		}
		b.WriteRune(r)
		dash = false
	}
	body := strings.Trim(b.String(), "-")
	if max := maxBaseLen - len(prefix) - len(suffix); len(body) > max {
		body = strings.Trim(body[:max], "-")
	}
	return prefix + body + suffix
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
