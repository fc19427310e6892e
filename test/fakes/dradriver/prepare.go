package dradriver

// Prepare and unprepare (kubeletplugin.DRAPlugin), the claims' status and
// the CDI specs.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Data is what the driver writes to a device's status.devices[].data.
type Data struct {
	InterfaceName string `json:"interfaceName"`
	PCIAddress    string `json:"pciAddress"`
	// DeviceID is the interface's name with Options.InterfaceIDs: the ID
	// a CNI plugin moving the named interface (host-device's "device")
	// is handed.
	DeviceID string `json:"deviceID,omitempty"`
}

// statusTimeout bounds a claim status write (the kubelet's prepare call
// waits for it).
const statusTimeout = 10 * time.Second

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: each claim's
// devices of this driver are checked (this node's pool, a device it
// publishes), their status entries written, their CDI spec written.
// Preparing a claim again gives the same answer.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := d.prepare(ctx, c)
		if err != nil {
			d.o.Logf("fake DRA driver: claim %s/%s not prepared: %v", c.Namespace, c.Name, err)
		} else {
			d.o.Logf("fake DRA driver: claim %s/%s prepared: %d devices", c.Namespace, c.Name, len(devs))
		}
		out[c.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devs}
	}
	return out, nil
}

// prepare checks and records one claim.
func (d *Driver) prepare(ctx context.Context, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	where := fmt.Sprintf("ResourceClaim %s/%s", c.Namespace, c.Name)
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("%s: not allocated", where)
	}
	var devs []kubeletplugin.Device
	var status []resourceapi.AllocatedDeviceStatus
	p := &prepared{namespace: c.Namespace, name: c.Name}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.o.DriverName {
			continue
		}
		dev, ok := d.device(r.Device)
		if !ok || r.Pool != d.o.NodeName {
			return nil, fmt.Errorf("%s request %q: device %s/%s is not one of this driver's on node %s", where, r.Request, r.Pool, r.Device, d.o.NodeName)
		}
		data := Data{InterfaceName: dev.Interface, PCIAddress: dev.PCIAddress}
		if d.o.InterfaceIDs {
			data.DeviceID = dev.Interface
		}
		raw, err := json.Marshal(data)
		if err != nil {
			return nil, err
		}
		status = append(status, resourceapi.AllocatedDeviceStatus{Driver: d.o.DriverName, Pool: r.Pool, Device: r.Device,
			ShareID: (*string)(r.ShareID), Data: &runtime.RawExtension{Raw: raw}})
		kd := kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, ShareID: r.ShareID}
		if d.o.CDIDir != "" {
			kd.CDIDeviceIDs = []string{d.cdiKind() + "=" + cdiName(c.UID, dev.Name)}
		}
		if d.o.Metadata {
			kd.Metadata = &kubeletplugin.DeviceMetadata{Attributes: map[string]resourceapi.DeviceAttribute{
				"resource.kubernetes.io/pciBusID": {StringValue: &dev.PCIAddress},
				d.o.DriverName + "/ifName":        {StringValue: &dev.Interface},
			}}
		}
		devs = append(devs, kd)
		p.devices = append(p.devices, dev.Name)
	}
	if d.o.CDIDir != "" && len(devs) > 0 {
		if err := d.writeCDISpec(c.UID, p.devices); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if err := d.writeStatus(ctx, c.Namespace, c.Name, c.UID, status); err != nil {
		return nil, fmt.Errorf("%s: status: %w", where, err)
	}
	d.mu.Lock()
	d.prepared[c.UID] = p
	d.mu.Unlock()
	return devs, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: the claim's
// status entries of this driver go (if the claim still exists), and its
// CDI spec.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		d.mu.Lock()
		if _, ok := d.prepared[c.UID]; !ok {
			d.prepared[c.UID] = &prepared{namespace: c.Namespace, name: c.Name}
		}
		d.mu.Unlock()
		out[c.UID] = d.unprepare(ctx, c.UID)
		d.o.Logf("fake DRA driver: claim %s/%s unprepared: %v", c.Namespace, c.Name, out[c.UID])
	}
	return out, nil
}

func (d *Driver) unprepare(ctx context.Context, uid types.UID) error {
	d.mu.Lock()
	p := d.prepared[uid]
	d.mu.Unlock()
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	err := d.writeStatus(ctx, p.namespace, p.name, uid, nil)
	if d.o.CDIDir != "" {
		if rerr := os.Remove(d.cdiPath(uid)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	if err == nil {
		d.mu.Lock()
		delete(d.prepared, uid)
		d.mu.Unlock()
	}
	return err
}

// writeStatus makes the claim's status.devices entries of this driver be
// entries (none: removed), keeping every other driver's; a claim gone or
// replaced (another UID) is left alone.
func (d *Driver) writeStatus(ctx context.Context, namespace, name string, uid types.UID, entries []resourceapi.AllocatedDeviceStatus) error {
	claims := d.o.Client.ResourceV1().ResourceClaims(namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := claims.Get(ctx, name, metav1.GetOptions{})
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if c.UID != uid {
			return nil
		}
		keep := make([]resourceapi.AllocatedDeviceStatus, 0, len(c.Status.Devices)+len(entries))
		for _, s := range c.Status.Devices {
			if s.Driver != d.o.DriverName {
				keep = append(keep, s)
			}
		}
		keep = append(keep, entries...)
		if len(keep) == 0 && len(c.Status.Devices) == 0 {
			return nil
		}
		c.Status.Devices = keep
		_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{FieldManager: d.o.DriverName})
		if isNotFound(err) {
			return nil
		}
		return err
	})
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// CDI: one spec per claim, <CDIDir>/<driver>-<claim UID>.json, kind
// "<driver>/nic", a device per allocated device that sets an environment
// variable naming the fake PCI address.

func (d *Driver) cdiKind() string { return d.o.DriverName + "/nic" }

func cdiName(uid types.UID, device string) string { return string(uid) + "-" + device }

func (d *Driver) cdiPath(uid types.UID) string {
	return filepath.Join(d.o.CDIDir, d.o.DriverName+"-"+string(uid)+".json")
}

func (d *Driver) writeCDISpec(uid types.UID, devices []string) error {
	spec := &cdispec.Spec{Kind: d.cdiKind()}
	for _, name := range devices {
		dev, _ := d.device(name)
		spec.Devices = append(spec.Devices, cdispec.Device{Name: cdiName(uid, name), ContainerEdits: cdispec.ContainerEdits{
			Env: []string{"FAKE_NIC_PCI_ADDRESS=" + dev.PCIAddress, "FAKE_NIC_INTERFACE=" + dev.Interface}}})
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	spec.Version = v
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.o.CDIDir, 0o755); err != nil {
		return err
	}
	tmp := d.cdiPath(uid) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, d.cdiPath(uid))
}

// HandleError implements kubeletplugin.DRAPlugin: logged.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	d.o.Logf("fake DRA driver: %s: %v", msg, err)
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: not offered.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
