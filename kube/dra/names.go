package dra

// Device names and attribute values within what the API server accepts
// (resource.k8s.io/v1 validation, k8s.io/kubernetes pkg/apis/resource/
// validation): a device name is a DNS label (at most 63 characters), a
// string or version attribute at most 64 bytes, a version semver 2.0.0,
// at most 32 attributes and capacities and 48 attribute values per device,
// an attribute's ID at most 32 characters and its domain at most 63. A
// NetworkAttachmentDefinition's name is tenant input of up to 253
// characters: whatever it is, the device built from it either fits these
// limits or is left out (validDevice), never sent to make the whole slice
// invalid.

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	resourceapi "k8s.io/api/resource/v1"
)

// Limits of resource.k8s.io/v1 (not all of them exported by k8s.io/api).
const (
	maxAttrValueLen   = resourceapi.DeviceAttributeMaxValueLength                     // 64 bytes
	maxAttrsPerDevice = resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice  // 32
	maxAttrValues     = resourceapi.ResourceSliceMaxAttributeValuesPerDevice          // 48
	maxAttrIDLen      = resourceapi.DeviceMaxIDLength                                 // 32
	maxAttrDomainLen  = resourceapi.DeviceMaxDomainLength                             // 63
	maxDeviceNameLen  = 63                                                            // a DNS label
	maxSliceDevices   = resourceapi.ResourceSliceMaxDevices                           // 128
	maxSlotSuffixLen  = 4                                                             // "-127": config allows at most 128 slots
	maxBaseLen        = maxDeviceNameLen - maxSlotSuffixLen                           // 59
	hashChars         = 26                                                            // 128 bits of SHA-256 in base32
	shortHashHex      = 16                                                            // 64 bits of SHA-256 in hex
	shortMark         = "#"                                                           // in no Kubernetes or CNI name
	legacyMaxBaseLen  = 63 - 4                                                        // the names before issue 28
	legacyHashHexLen  = 8                                                             // 4 bytes
	legacyHashOfBase  = "-"                                                           // legacy separator
	deviceNameReSrc   = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`                             // DNS-1123 label
	semverReSrc       = `^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` + semverTailReSrc // as the API server
	semverTailReSrc   = `(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`
	identifierReSrc   = `^[A-Za-z_][A-Za-z0-9_]*$` // an attribute's ID (a C identifier)
)

var (
	deviceNameRe = regexp.MustCompile(deviceNameReSrc)
	semverRe     = regexp.MustCompile(semverReSrc)
	identifierRe = regexp.MustCompile(identifierReSrc)
	b32          = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)
)

// DeviceName is the stable device name of a network: a readable prefix
// ("net-<name>" or "nad-<namespace>-<name>", lower-cased, other characters
// as '-', cut to fit) and 128 bits of the network attribute's SHA-256 in
// base32, so two networks never share one in practice (a collision takes
// about 2^64 tries); BuildInventory still refuses a duplicate. At most 59
// characters: a slot suffix ("-127") keeps it a DNS label. The same
// network keeps its name across restarts, so allocations stay valid.
func DeviceName(network string) string {
	sum := sha256.Sum256([]byte(network))
	suffix := "-" + b32.EncodeToString(sum[:16])[:hashChars]
	prefix := "net-"
	if strings.Contains(network, "/") {
		prefix = "nad-"
	}
	body := readable(network, maxBaseLen-len(prefix)-len(suffix))
	if body == "" {
		return prefix[:3] + suffix
	}
	return prefix + body + suffix
}

// legacyDeviceName is DeviceName before issue 28 (4 bytes of hash, which
// tenants could make collide): kept to resolve devices allocated before an
// upgrade, never published.
func legacyDeviceName(network string) string {
	sum := sha256.Sum256([]byte(network))
	suffix := legacyHashOfBase + hex.EncodeToString(sum[:legacyHashHexLen/2])
	prefix := "net-"
	if strings.Contains(network, "/") {
		prefix = "nad-"
	}
	return prefix + readable(network, legacyMaxBaseLen-len(prefix)-len(suffix)) + suffix
}

// readable is network lower-cased with runs of other characters as one
// '-', trimmed, cut to at most max bytes.
func readable(network string, max int) string {
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
	if len(body) > max {
		body = strings.Trim(body[:max], "-")
	}
	return body
}

// NetworkAttr is the value of a device's network attribute: the network
// itself when it fits an attribute (64 bytes), else its first 47 bytes,
// '#' and 64 bits of its SHA-256 in hex — 64 bytes, readable, and never a
// real network's name ('#' is in neither a Kubernetes name nor a CNI
// network name). A NAD named longer than its namespace/name fits is still
// published and selectable by this value (kubectl get resourceslices shows
// it; docs/dra.md says how to compute it).
func NetworkAttr(network string) string {
	if len(network) <= maxAttrValueLen && utf8.ValidString(network) {
		return network
	}
	sum := sha256.Sum256([]byte(network))
	h := hex.EncodeToString(sum[:shortHashHex/2])
	// Valid UTF-8, cut at a character: JSON would turn a broken one into
	// three bytes, past the limit.
	prefix := strings.ToValidUTF8(network, "")
	n := maxAttrValueLen - len(shortMark) - len(h)
	for n > 0 && n < len(prefix) && !utf8.RuneStart(prefix[n]) {
		n--
	}
	return prefix[:min(n, len(prefix))] + shortMark + h
}

// validDevice says why the API server would refuse d in a ResourceSlice
// (the checks that a device built here can fail), nil when it would not.
func validDevice(d resourceapi.Device) error {
	if len(d.Name) > maxDeviceNameLen || !deviceNameRe.MatchString(d.Name) {
		return fmt.Errorf("device name %q is not a DNS label", d.Name)
	}
	if n := len(d.Attributes) + len(d.Capacity); n > maxAttrsPerDevice {
		return fmt.Errorf("%d attributes and capacities, more than %d", n, maxAttrsPerDevice)
	}
	values := 0
	for name, a := range d.Attributes {
		if err := validAttrName(string(name)); err != nil {
			return err
		}
		switch {
		case a.StringValue != nil:
			values++
			if len(*a.StringValue) > maxAttrValueLen || !utf8.ValidString(*a.StringValue) {
				return fmt.Errorf("attribute %s: %d bytes, more than %d (or not UTF-8)", name, len(*a.StringValue), maxAttrValueLen)
			}
		case a.VersionValue != nil:
			values++
			if len(*a.VersionValue) > maxAttrValueLen || !semverRe.MatchString(*a.VersionValue) {
				return fmt.Errorf("attribute %s: %q is not a semantic version of at most %d bytes", name, *a.VersionValue, maxAttrValueLen)
			}
		case a.BoolValue != nil, a.IntValue != nil:
			values++
		default:
			return fmt.Errorf("attribute %s: no value, or a kind this driver does not publish", name)
		}
	}
	if values > maxAttrValues {
		return fmt.Errorf("%d attribute values, more than %d", values, maxAttrValues)
	}
	return nil
}

// validAttrName checks an attribute's name: "<ID>" or "<domain>/<ID>".
func validAttrName(name string) error {
	domain, id, found := strings.Cut(name, "/")
	if !found {
		id, domain = domain, ""
	}
	if len(id) > maxAttrIDLen || !identifierRe.MatchString(id) || len(domain) > maxAttrDomainLen {
		return fmt.Errorf("attribute name %q is not valid", name)
	}
	return nil
}
