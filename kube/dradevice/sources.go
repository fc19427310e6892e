package dradevice

// The three sources of a device's ID, tried in order (metadata, the
// claim's status data, the ResourceSlice), and the checks of what they
// give. A source that has a value that is not a usable ID is an error, not
// skipped: a driver's mistake is reported where it is, not papered over
// with another source's value.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/nri-cni/nri-cni/deviceinfo"
)

// device resolves one allocation result.
func (r *Resolver) device(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult, md *metadataCache) (Device, error) {
	d := Device{Claim: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, Request: res.Request,
		Driver: res.Driver, Pool: res.Pool, Device: res.Device}
	if res.ShareID != nil {
		d.ShareID = string(*res.ShareID)
	}
	fail := func(err error) (Device, error) { return Device{}, fmt.Errorf("%s: %w", d.Where(), err) }
	idAttrs := r.IDAttributes
	if len(idAttrs) == 0 {
		idAttrs = DefaultIDAttributes
	}

	// 1. KEP-5304 metadata.
	mdDev, err := md.device(res)
	if err != nil {
		return fail(err)
	}
	status := statusEntry(claim, res)
	if status != nil {
		d.NetworkData = status.NetworkData
	}
	var mdAttrs, sliceAttrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	if mdDev != nil {
		mdAttrs = mdDev.Attributes
		if d.NetworkData == nil {
			d.NetworkData = mdDev.NetworkData
		}
		d.DeviceID, d.IDKey, err = fromAttributes(mdAttrs, res.Driver, idAttrs)
		d.Source = SourceMetadata
	}
	// 2. status.devices[].data.
	if err == nil && d.DeviceID == "" && status != nil && status.Data != nil {
		d.DeviceID, d.IDKey, err = fromData(status.Data.Raw)
		d.Source = SourceData
	}
	// 3. The ResourceSlice: the ID if still none, and what the metadata
	// may not tell (resourceName, the PF, the RDMA device). Once an ID is
	// found, a slice not (yet) listed only costs that.
	var sliceErr error
	if err == nil {
		var sliceDev *resourceapi.Device
		sliceDev, sliceErr = r.sliceDevice(res)
		if sliceDev != nil {
			sliceAttrs = sliceDev.Attributes
			if d.DeviceID == "" {
				d.DeviceID, d.IDKey, err = fromAttributes(sliceAttrs, res.Driver, idAttrs)
				d.Source = SourceSlice
			}
		}
	}
	if err != nil {
		return fail(fmt.Errorf("%s: %w", d.Source, err))
	}
	if d.DeviceID == "" {
		return fail(r.missing(mdDev != nil, status, sliceErr, idAttrs))
	}
	if d.Kind, err = kindOf(d.DeviceID); err != nil {
		return fail(fmt.Errorf("%s %s: %w", d.Source, d.IDKey, err))
	}
	attr := func(name string) (string, bool) {
		if v, ok := attrString(mdAttrs, res.Driver, name); ok {
			return v, true
		}
		return attrString(sliceAttrs, res.Driver, name)
	}
	d.ResourceName, _ = attr(AttrCNIResourceName)
	if d.Kind == KindPCI {
		d.Info = deviceinfo.NewPCI(d.DeviceID)
		if pf, ok := attr(attrPFPCIAddress); ok && deviceinfo.IsPCIAddress(pf) {
			d.Info.PCI.PFPCIAddress = pf
		}
		if rdma, ok := attr(attrRDMADevice); ok && rdma != "" {
			d.Info.PCI.RDMADevice = rdma
		}
		if d.Info.Validate() != nil { // an odd RDMA name: keep the address alone
			d.Info = deviceinfo.NewPCI(d.DeviceID)
		}
	}
	return d, nil
}

// missing says what was looked at when no source had an ID.
func (r *Resolver) missing(haveMetadata bool, status *resourceapi.AllocatedDeviceStatus, sliceErr error, idAttrs []string) error {
	var parts []string
	switch {
	case r.Metadata == nil:
		parts = append(parts, "no device metadata read")
	case haveMetadata:
		parts = append(parts, "its device metadata has none of the attributes "+strings.Join(idAttrs, ", "))
	default:
		parts = append(parts, "its driver wrote no device metadata (KEP-5304)")
	}
	switch {
	case status == nil:
		parts = append(parts, "the claim's status.devices has no entry for it")
	case status.Data == nil:
		parts = append(parts, "its status.devices entry has no data")
	default:
		parts = append(parts, "its status.devices data has none of "+strings.Join(dataKeys, ", ")+", cniConfig.deviceID")
	}
	switch {
	case r.Slices == nil:
		parts = append(parts, "no ResourceSlices read")
	case sliceErr != nil:
		return fmt.Errorf("%w: %s; %w", ErrNoDeviceID, strings.Join(parts, "; "), sliceErr)
	default:
		parts = append(parts, "its ResourceSlice attributes have none of "+strings.Join(idAttrs, ", "))
	}
	return fmt.Errorf("%w: %s", ErrNoDeviceID, strings.Join(parts, "; "))
}

// statusEntry is the claim's status.devices entry of the result's device.
func statusEntry(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult) *resourceapi.AllocatedDeviceStatus {
	for i := range claim.Status.Devices {
		s := &claim.Status.Devices[i]
		if s.Driver != res.Driver || s.Pool != res.Pool || s.Device != res.Device {
			continue
		}
		if res.ShareID != nil && (s.ShareID == nil || *s.ShareID != string(*res.ShareID)) {
			continue
		}
		return s
	}
	return nil
}

// sliceDevice finds the result's device in the newest generation of its
// driver's pool.
func (r *Resolver) sliceDevice(res resourceapi.DeviceRequestAllocationResult) (*resourceapi.Device, error) {
	if r.Slices == nil {
		return nil, nil
	}
	all, err := r.Slices.ResourceSlices(res.Driver, res.Pool)
	if err != nil {
		return nil, fmt.Errorf("listing the ResourceSlices of driver %s pool %s: %w", res.Driver, res.Pool, err)
	}
	var newest int64 = -1
	for _, s := range all {
		if s.Spec.Driver == res.Driver && s.Spec.Pool.Name == res.Pool && s.Spec.Pool.Generation > newest {
			newest = s.Spec.Pool.Generation
		}
	}
	for _, s := range all {
		if s.Spec.Driver != res.Driver || s.Spec.Pool.Name != res.Pool || s.Spec.Pool.Generation != newest {
			continue
		}
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == res.Device {
				return &s.Spec.Devices[i], nil
			}
		}
	}
	return nil, fmt.Errorf("%w (driver %s, pool %s, %d slices)", ErrNoSlice, res.Driver, res.Pool, len(all))
}

// qualify returns the attribute name in its full form: a name without a
// domain is in the driver's.
func qualify(name, driver string) resourceapi.QualifiedName {
	if strings.Contains(name, "/") {
		return resourceapi.QualifiedName(name)
	}
	return resourceapi.QualifiedName(driver + "/" + name)
}

// attrString reads a string attribute by its qualified name; a driver may
// write its own attributes with or without its domain.
func attrString(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, driver, name string) (string, bool) {
	q := qualify(name, driver)
	a, ok := attrs[q]
	if !ok {
		if dom, id, _ := strings.Cut(string(q), "/"); dom == driver {
			a, ok = attrs[resourceapi.QualifiedName(id)]
		}
	}
	if !ok || a.StringValue == nil {
		return "", false
	}
	return *a.StringValue, true
}

// fromAttributes returns the first ID attribute present (a present one
// that is not a non-empty string is an error).
func fromAttributes(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, driver string, names []string) (string, string, error) {
	for _, n := range names {
		q := qualify(n, driver)
		v, ok := attrString(attrs, driver, n)
		if ok && v != "" {
			return v, string(q), nil
		}
		if _, present := attrs[q]; present {
			return "", string(q), fmt.Errorf("attribute %s: %w: not a non-empty string", q, ErrInvalidDeviceID)
		}
	}
	return "", "", nil
}

// dataKeys are the top-level keys of status.devices[].data an ID is read
// from, first found wins; then cniConfig.deviceID.
var dataKeys = []string{"deviceID", "pciAddress", "pciBusID"}

// fromData reads an ID from a driver's status.devices data: top-level
// deviceID, pciAddress or pciBusID, or cniConfig.deviceID (dra-driver-sriov
// writes {vfConfig, cniConfig, cniResult} after its own ADD, the CNI config
// carrying the VF's PCI address as deviceID; at prepare, and in its Multus
// mode, it writes only the VfConfig, which has no address).
func fromData(raw []byte) (string, string, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", "", nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return "", "", nil // not an object: no keys of ours (drivers write what they like)
	}
	get := func(m map[string]json.RawMessage, key, name string) (string, string, error) {
		v, ok := m[key]
		if !ok {
			return "", "", nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil || s == "" {
			return "", name, fmt.Errorf("data key %s: %w: not a non-empty string", name, ErrInvalidDeviceID)
		}
		return s, name, nil
	}
	for _, k := range dataKeys {
		if s, name, err := get(top, k, k); s != "" || err != nil {
			return s, name, err
		}
	}
	if cc, ok := top["cniConfig"]; ok {
		var m map[string]json.RawMessage
		if json.Unmarshal(cc, &m) == nil {
			return get(m, "deviceID", "cniConfig.deviceID")
		}
	}
	return "", "", nil
}

// auxRE is an auxiliary bus device name: <module>.<device>.<id>
// ("mlx5_core.sf.4", "mlx5_core.eth.0").
var auxRE = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+\.[0-9]+$`)

// otherRE bounds any other ID: it becomes part of file names (device-info)
// and plugins join it to /sys paths.
var otherRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:=-]{0,252}$`)

// kindOf classifies and checks a device ID.
func kindOf(id string) (Kind, error) {
	switch {
	case deviceinfo.IsPCIAddress(id):
		return KindPCI, nil
	case strings.Contains(id, ".."):
	case auxRE.MatchString(id):
		return KindAuxiliary, nil
	case otherRE.MatchString(id):
		return KindOther, nil
	}
	return "", fmt.Errorf("%w %q: not a PCI address, an auxiliary device name or a name of letters, digits and . _ : = -", ErrInvalidDeviceID, printable(id))
}

func printable(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// metadataCache reads each (driver, base request) metadata once per Resolve.
type metadataCache struct {
	r     *Resolver
	claim *resourceapi.ResourceClaim
	read  map[[2]string]*metadata.DeviceMetadata
}

// device returns the metadata of the result's device, nil if none.
func (c *metadataCache) device(res resourceapi.DeviceRequestAllocationResult) (*metadata.Device, error) {
	if c.r.Metadata == nil {
		return nil, nil
	}
	key := [2]string{res.Driver, resourceclaim.BaseRequestRef(res.Request)}
	md, ok := c.read[key]
	if !ok {
		var err error
		md, err = c.r.Metadata.DeviceMetadata(res.Driver, c.claim, key[1])
		if err != nil {
			return nil, fmt.Errorf("device metadata (KEP-5304) of driver %s: %w", res.Driver, err)
		}
		if c.read == nil {
			c.read = map[[2]string]*metadata.DeviceMetadata{}
		}
		c.read[key] = md
	}
	if md == nil {
		return nil, nil
	}
	for i := range md.Requests {
		rq := &md.Requests[i]
		if rq.Name != res.Request && rq.Name != key[1] {
			continue
		}
		for j := range rq.Devices {
			dv := &rq.Devices[j]
			if dv.Driver == res.Driver && dv.Pool == res.Pool && dv.Name == res.Device {
				return dv, nil
			}
		}
	}
	return nil, nil
}

// IsNotFound reports whether err says a device or its slice is not (yet)
// published: the caller may retry once its informer catches up.
func IsNotFound(err error) bool { return errors.Is(err, ErrNoSlice) }
