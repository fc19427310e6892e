// Package dradriver is a fake DRA driver for tests: "another driver" whose
// claims a device-backed network takes its device from (issue 30). It is a
// real kubelet plugin (k8s.io/dynamic-resource-allocation/kubeletplugin,
// as kube/dra is): it registers in the kubelet's plugins_registry,
// publishes N devices in its node's ResourceSlice and prepares claims the
// scheduler allocated them to. Each device is backed by a dummy interface
// it creates with a unique name (Options.Links; root; a veth where the
// kernel has no dummy driver) and has a fake PCI
// address in PCI domain fffe, which no machine has: a CNI plugin handed
// one finds no such device, so a test cannot move a real NIC by mistake.
//
// What it publishes and writes, as the drivers it stands for do
// (docs/device-networks-design.md):
//
//   - device attributes <driver>/ifName, <driver>/pciAddress and
//     resource.kubernetes.io/pciBusID (as dra-driver-sriov); with
//     Options.ResourceName also k8s.cni.cncf.io/resourceName and
//     k8s.cni.cncf.io/deviceID (Multus ≥ 4.3.1's attributes);
//   - at prepare, the claim's status.devices entry of each of its devices
//     with data {"interfaceName": …, "pciAddress": …} (and "deviceID", the
//     interface name, with Options.InterfaceIDs);
//   - CDI device IDs (Options.CDIDir: a CDI spec per claim) or none;
//   - KEP-5304 device metadata through the helper (Options.Metadata);
//   - the device plugin device-info files (Options.DeviceInfo with
//     ResourceName), as dra-driver-sriov does in its Multus mode.
//
// Stop undoes everything: the helper, its slices, the claims' status
// entries it wrote for claims still prepared, the links, the files. It
// does not import "testing".
package dradriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/deviceinfo"
)

// DefaultDriverName is the fake's driver name (and its DeviceClass's).
const DefaultDriverName = "fake-nic.example.com"

// Options configure a Driver.
type Options struct {
	// DriverName defaults to DefaultDriverName.
	DriverName string
	// NodeName is the node: its pool, its slice's owner. Required.
	NodeName string
	// Client writes the slice and the claims' status. Required.
	Client kubernetes.Interface
	// KubeletDir is the kubelet's --root-dir: the driver registers in
	// <KubeletDir>/plugins_registry and serves in <KubeletDir>/plugins/<driver>
	// (test/cluster's Cluster.KubeletRootDir). Required.
	KubeletDir string
	// Devices is how many devices to publish (default 1, at most 128: one
	// slice).
	Devices int
	// Links backs each device with a dummy interface of a unique name
	// (needs CAP_NET_ADMIN); without it the interface names are only names.
	Links bool
	// ResourceName, when set, publishes the Multus attributes
	// k8s.cni.cncf.io/resourceName (this value) and k8s.cni.cncf.io/deviceID
	// (the device's PCI address).
	ResourceName string
	// InterfaceIDs writes each device's interface name as "deviceID" in
	// its status.devices[].data (nri-cni reads the ID there before the
	// slice's PCI address): a test plugin can move the interface into the
	// pod by the ID it is handed.
	InterfaceIDs bool
	// DeviceInfo, with ResourceName, writes each device's device plugin
	// device-info file (removed at Stop).
	DeviceInfo *deviceinfo.Store
	// CDIDir, when set, is where a CDI spec per prepared claim goes, and
	// prepare returns its CDI device IDs; unset, prepare returns none. A
	// container runtime must read CDI specs from there (containerd's
	// defaults: /etc/cdi, /var/run/cdi).
	CDIDir string
	// Metadata turns on KEP-5304 device metadata (the helper writes it
	// under the plugin dir and a CDI spec into CDIDir, which it needs).
	Metadata bool
	// Logf, when set, hears what the driver does.
	Logf func(format string, args ...any)
}

// Device is one published device.
type Device struct {
	Name       string // the DRA device name: nic-0, nic-1, …
	Interface  string // its host interface
	PCIAddress string // fake: domain fffe
}

// Driver is a running fake driver. Safe for concurrent use.
type Driver struct {
	o       Options
	devices []Device
	helper  *kubeletplugin.Helper
	cancel  context.CancelFunc

	mu       sync.Mutex              // guards prepared
	prepared map[types.UID]*prepared // by claim UID
}

// prepared is a claim the driver prepared.
type prepared struct {
	namespace, name string
	devices         []string // device names
}

// Start creates the devices' links, registers with the kubelet and
// publishes the slice. On error everything done is undone.
func Start(ctx context.Context, o Options) (_ *Driver, err error) {
	if o.DriverName == "" {
		o.DriverName = DefaultDriverName
	}
	if o.Devices == 0 {
		o.Devices = 1
	}
	switch {
	case o.NodeName == "" || o.Client == nil || o.KubeletDir == "":
		return nil, errors.New("fake DRA driver: NodeName, Client and KubeletDir are required")
	case o.Devices < 0 || o.Devices > resourceapi.ResourceSliceMaxDevices:
		return nil, fmt.Errorf("fake DRA driver: %d devices (1 to %d)", o.Devices, resourceapi.ResourceSliceMaxDevices)
	case o.Metadata && o.CDIDir == "":
		return nil, errors.New("fake DRA driver: Metadata needs CDIDir (the helper writes a CDI spec per request)")
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	d := &Driver{o: o, prepared: map[types.UID]*prepared{}}
	d.devices, err = newDevices(o.Devices)
	if err != nil {
		return nil, err
	}
	ctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Stop(context.Background()))
		}
	}()
	if o.Links {
		if err := d.addLinks(); err != nil {
			return d, err
		}
	}
	if o.DeviceInfo != nil && o.ResourceName != "" {
		for _, dev := range d.devices {
			if err := o.DeviceInfo.WriteDP(o.ResourceName, dev.PCIAddress, deviceinfo.NewPCI(dev.PCIAddress)); err != nil {
				return d, fmt.Errorf("fake DRA driver: %w", err)
			}
		}
	}
	registrar := filepath.Join(o.KubeletDir, "plugins_registry")
	data := filepath.Join(o.KubeletDir, "plugins", o.DriverName)
	for _, dir := range []string{registrar, data} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return d, fmt.Errorf("fake DRA driver: %w", err)
		}
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(o.DriverName),
		kubeletplugin.NodeName(o.NodeName),
		kubeletplugin.KubeClient(o.Client),
		kubeletplugin.RegistrarDirectoryPath(registrar),
		kubeletplugin.PluginDataDirectoryPath(data),
		kubeletplugin.HealthService(false),
	}
	if o.Metadata {
		opts = append(opts, kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
			kubeletplugin.CDIDirectory(o.CDIDir))
	}
	if d.helper, err = kubeletplugin.Start(ctx, d, opts...); err != nil {
		return d, fmt.Errorf("fake DRA driver %s: %w", o.DriverName, err)
	}
	if err := d.helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		o.NodeName: {Slices: []resourceslice.Slice{{Devices: d.sliceDevices()}}}}}); err != nil {
		return d, fmt.Errorf("fake DRA driver %s: %w", o.DriverName, err)
	}
	o.Logf("fake DRA driver %s: %d devices on node %s", o.DriverName, len(d.devices), o.NodeName)
	return d, nil
}

// newDevices names n devices: interfaces "fk<8 hex>-<i>" (unique on the
// host, at most 15 bytes), PCI addresses fffe:<random bus>:<i/8>.<i%8>.
func newDevices(n int) ([]Device, error) {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	prefix, bus := "fk"+hex.EncodeToString(b[:4]), b[4]
	devs := make([]Device, n)
	for i := range devs {
		devs[i] = Device{Name: fmt.Sprintf("nic-%d", i), Interface: fmt.Sprintf("%s-%d", prefix, i),
			PCIAddress: fmt.Sprintf("fffe:%02x:%02x.%d", bus, i/8, i%8)}
	}
	return devs, nil
}

// Name is the driver's name.
func (d *Driver) Name() string { return d.o.DriverName }

// Devices returns the published devices.
func (d *Driver) Devices() []Device { return append([]Device(nil), d.devices...) }

// Prepared returns the claims prepared now: claim UID → device names.
func (d *Driver) Prepared() map[types.UID][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID][]string, len(d.prepared))
	for uid, p := range d.prepared {
		out[uid] = append([]string(nil), p.devices...)
	}
	return out
}

// sliceDevices are the slice's devices with their attributes.
func (d *Driver) sliceDevices() []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(d.devices))
	for _, dev := range d.devices {
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			resourceapi.QualifiedName(d.o.DriverName + "/ifName"):     {StringValue: ptr.To(dev.Interface)},
			resourceapi.QualifiedName(d.o.DriverName + "/pciAddress"): {StringValue: ptr.To(dev.PCIAddress)},
			"resource.kubernetes.io/pciBusID":                         {StringValue: ptr.To(dev.PCIAddress)},
		}
		if d.o.ResourceName != "" {
			attrs["k8s.cni.cncf.io/resourceName"] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.o.ResourceName)}
			attrs["k8s.cni.cncf.io/deviceID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(dev.PCIAddress)}
		}
		out = append(out, resourceapi.Device{Name: dev.Name, Attributes: attrs})
	}
	return out
}

func (d *Driver) device(name string) (Device, bool) {
	for _, dev := range d.devices {
		if dev.Name == name {
			return dev, true
		}
	}
	return Device{}, false
}

// addLinks creates a dummy interface per device, or, on a kernel without
// the dummy driver (this CI's), a veth whose peer (<name>p) stays on the
// host: either can be moved into a pod's namespace by a CNI plugin (a
// bridge cannot: it is local to its namespace).
func (d *Driver) addLinks() error {
	for _, dev := range d.devices {
		attrs := netlink.LinkAttrs{Name: dev.Interface}
		err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: attrs})
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: dev.Interface + "p"})
		}
		if err != nil {
			return fmt.Errorf("fake DRA driver: interface %s: %w", dev.Interface, err)
		}
	}
	return nil
}

// Stop stops serving and removes what the driver made: its slices of the
// node, its status entries of the claims still prepared, CDI specs, links,
// device-info files. Safe to call twice.
func (d *Driver) Stop(ctx context.Context) error {
	if d.helper != nil {
		d.helper.Stop()
	}
	if d.cancel != nil {
		d.cancel()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var errs []error
	if d.helper != nil {
		errs = append(errs, d.deleteSlices(ctx))
	}
	d.mu.Lock()
	uids := make([]types.UID, 0, len(d.prepared))
	for uid := range d.prepared {
		uids = append(uids, uid)
	}
	d.mu.Unlock()
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	for _, uid := range uids {
		errs = append(errs, d.unprepare(ctx, uid))
	}
	if d.o.Links {
		for _, dev := range d.devices {
			// The interface, or its veth peer if the interface is in a
			// pod's namespace still (deleting one end deletes both).
			for _, name := range []string{dev.Interface, dev.Interface + "p"} {
				if l, err := netlink.LinkByName(name); err == nil {
					errs = append(errs, netlink.LinkDel(l))
					break
				}
			}
		}
	}
	if d.o.DeviceInfo != nil && d.o.ResourceName != "" {
		for _, dev := range d.devices {
			errs = append(errs, d.o.DeviceInfo.RemoveDP(d.o.ResourceName, dev.PCIAddress))
		}
	}
	return errors.Join(errs...)
}

// deleteSlices deletes the driver's slices of the node (the helper's
// controller leaves them: the Node owns them).
func (d *Driver) deleteSlices(ctx context.Context) error {
	l, err := d.o.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: resourceapi.ResourceSliceSelectorDriver + "=" + d.o.DriverName})
	if err != nil {
		return fmt.Errorf("fake DRA driver: listing its slices: %w", err)
	}
	var errs []error
	for _, s := range l.Items {
		if s.Spec.Driver != d.o.DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != d.o.NodeName {
			continue
		}
		if err := d.o.Client.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
