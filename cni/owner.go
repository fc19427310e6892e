package cni

// Ownership of cached attachments. libcni's cache (cacheDir/results) is
// shared with the runtime's own network (eth0) and with any other CNI user
// on the node (Multus delegates). nri-cni must be able to tell its own
// attachments there without its record — a record can be lost (a power
// loss leaves an empty file) while the attachment lives on — and know where
// each came from (a NetworkAttachmentDefinition's network is in no config
// dir). So every network list nri-cni ADDs carries a top-level marker:
// libcni caches the list's bytes with the ADD and hands plugins only their
// own plugin config, so the marker reaches no plugin.

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/libcni"
)

// OwnerKey is the top-level key of the marker.
const OwnerKey = "nri-cni.io/owner"

// Owner is the marker's value.
type Owner struct {
	// NAD is the NetworkAttachmentDefinition ("namespace/name") the
	// network came from; empty for a config dir network.
	NAD string `json:"nad,omitempty"`
	// Claim is the DRA ResourceClaim ("namespace/name") the attachment
	// was asked for by; empty for an annotation's or nri.conf's.
	Claim string `json:"claim,omitempty"`
}

// Owned returns a copy of n whose list carries the marker (replacing any
// the config had: a NetworkAttachmentDefinition cannot claim another
// origin). n is never modified: it is shared.
func (n *Network) Owned(o Owner) (*Network, error) {
	var list map[string]any
	if err := decodeNumbers(n.List.Bytes, &list); err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	list[OwnerKey] = o
	data, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	copied, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	return n.derived(copied), nil
}

// OwnerOf reads the marker of a cached config; ok is false without one
// (an attachment of someone else, or one nri-cni made before it marked
// them).
func OwnerOf(config []byte) (o Owner, ok bool) {
	// The key exactly: a struct tag would also match "NRI-CNI.IO/OWNER"
	// (encoding/json ignores case), which Owned does not replace.
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(config, &probe); err != nil {
		return Owner{}, false
	}
	raw, found := probe[OwnerKey]
	if !found || string(raw) == "null" || json.Unmarshal(raw, &o) != nil {
		return Owner{}, false
	}
	return o, true
}
