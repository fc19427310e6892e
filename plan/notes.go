package plan

// Notes: what planning left out of a pod's request without failing it.
// The NPWG spec tells an implementation to ignore an "ipam-claim-reference"
// it does not support and other implementations' extension keys; failing
// the pod would break pods written for Multus, and ignoring them in silence
// would leave the pod's owner guessing why a VM lost its persistent IP.
// Planning is pure: it returns the notes, and the caller tells the pod (a
// Warning Event) or logs them.

import "fmt"

// Note is one thing planning ignored in what a pod asked for.
type Note struct {
	// Network is the NetworkAttachmentDefinition ("namespace/name") and
	// IfName the interface of the attachment the note is about.
	Network, IfName string
	// Key is the selection element's key that was ignored.
	Key string
	// Warning: the pod does not get something it asked for (the caller
	// tells the pod); else the key meant nothing to nri-cni (a debug log).
	Warning bool
	// Message names the annotation, the element and the key.
	Message string
}

// notes are what planning ignored in sel, planned as the attachment a,
// whose element where names.
func (sel NetworkSelection) notes(where string, a Attachment) []Note {
	var out []Note
	if sel.IPAMClaim != "" {
		out = append(out, Note{Network: a.NAD, IfName: a.IfName, Key: KeyIPAMClaimReference, Warning: true,
			Message: fmt.Sprintf("%s: the IPAM claim %q (%q) was not used: nri-cni does not implement IPAMClaims and passes "+
				"the claim to no plugin, so %s's addresses come from the network's own IPAM", where, sel.IPAMClaim,
				KeyIPAMClaimReference, a.IfName)})
	}
	for _, k := range sel.Extensions {
		out = append(out, Note{Network: a.NAD, IfName: a.IfName, Key: k,
			Message: fmt.Sprintf("%s: key %q ignored: an extension key (reverse domain name notation) of another implementation", where, k)})
	}
	return out
}
