package deviceplugin

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultDevInfoDir is the Device Information spec's root
// (/var/run/k8s.cni.cncf.io/devinfo; device plugins write under dp/).
const DefaultDevInfoDir = "/var/run/k8s.cni.cncf.io/devinfo"

// LinkKind is what backs each device in the network namespace.
type LinkKind string

const (
	LinkVeth  LinkKind = "veth"  // a veth named as the device ID; its peer <ID>p stays (up) in the namespace
	LinkDummy LinkKind = "dummy" // a dummy interface named as the device ID (needs CONFIG_DUMMY)
	LinkNone  LinkKind = "none"  // no interface: IDs only (tests without CAP_NET_ADMIN)
)

// maxIfName is IFNAMSIZ-1.
const maxIfName = 15

// DevInfoPath is the Device Plugin Device Information file of a device
// (spec v1.1.0, 4.1): <base>/dp/<resourceName>-<deviceID>-device.json, with
// every "/" of the resource name (and, as the NPWG client library does, of
// the device ID) replaced by "-".
func DevInfoPath(base, resourceName, deviceID string) string {
	return filepath.Join(base, "dp", fmt.Sprintf("%s-%s-device.json",
		strings.ReplaceAll(resourceName, "/", "-"), strings.ReplaceAll(deviceID, "/", "-")))
}

// EnvName is the environment variable Allocate sets to the container's device
// IDs, named as sriov-network-device-plugin names it:
// PCIDEVICE_<resource prefix>_<resource name>, upper case, with "." (and here
// any other character a variable name cannot hold) as "_":
// vendor.example/res → PCIDEVICE_VENDOR_EXAMPLE_RES.
func EnvName(resourceName string) string {
	b := []byte(strings.ToUpper("PCIDEVICE_" + strings.Replace(resourceName, "/", "_", 1)))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// newIDs returns n device IDs: prefix + 6 random hex digits + index,
// zero-padded so that sorted order is index order (podresources sorts), unique
// on the host, each usable as an interface name (and, for veth, with "p").
func newIDs(prefix string, n int, kind LinkKind) ([]string, error) {
	r := make([]byte, 3)
	if _, err := rand.Read(r); err != nil {
		return nil, err
	}
	width := len(strconv.Itoa(n - 1))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%s%0*d", prefix, hex.EncodeToString(r), width, i)
	}
	limit := maxIfName
	if kind == LinkVeth {
		limit-- // the peer's "p"
	}
	if len(ids[n-1]) > limit {
		return nil, fmt.Errorf("device ID %q is longer than an interface name may be (%d): shorten IDPrefix or Count", ids[n-1], limit)
	}
	return ids, nil
}

// inNetNS runs f in the namespace at path ("" = the caller's).
func inNetNS(path string, f func() error) error {
	if path == "" {
		return f()
	}
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return f() })
}

// createLinks makes one interface per ID; on error it removes what it made.
func createLinks(kind LinkKind, netnsPath string, ids []string) (err error) {
	if kind == LinkNone {
		return nil
	}
	var made []string
	defer func() {
		if err != nil {
			err = errors.Join(err, deleteLinks(kind, netnsPath, made))
		}
	}()
	return inNetNS(netnsPath, func() error {
		for _, id := range ids {
			var link netlink.Link
			switch kind {
			case LinkDummy:
				link = &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: id}}
			case LinkVeth:
				link = &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: id}, PeerName: id + "p"}
			default:
				return fmt.Errorf("link kind %q: want dummy, veth or none", kind)
			}
			if err := netlink.LinkAdd(link); err != nil {
				if kind == LinkDummy && errors.Is(err, unix.EOPNOTSUPP) {
					return fmt.Errorf("creating dummy %s: %w (a kernel without CONFIG_DUMMY: use LinkVeth)", id, err)
				}
				return fmt.Errorf("creating %s %s: %w", kind, id, err)
			}
			made = append(made, id)
			if kind == LinkVeth {
				peer, err := netlink.LinkByName(id + "p")
				if err == nil {
					err = netlink.LinkSetUp(peer)
				}
				if err != nil {
					return fmt.Errorf("veth peer %sp: %w", id, err)
				}
			}
		}
		return nil
	})
}

// deleteLinks removes the interfaces of ids still in the namespace (a veth
// with its peer). One a CNI plugin moved into a pod is not there and stays,
// and so does its veth peer: deleting the peer would take the pod's
// interface; the pair goes with the pod's namespace.
func deleteLinks(kind LinkKind, netnsPath string, ids []string) error {
	if kind == LinkNone || len(ids) == 0 {
		return nil
	}
	var errs []error
	err := inNetNS(netnsPath, func() error {
		for _, id := range ids {
			link, err := netlink.LinkByName(id)
			if err != nil {
				if !errors.As(err, &netlink.LinkNotFoundError{}) {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
				}
				continue
			}
			// A veth's peer goes with it.
			if err := netlink.LinkDel(link); err != nil && !errors.As(err, &netlink.LinkNotFoundError{}) {
				errs = append(errs, fmt.Errorf("deleting %s: %w", id, err))
			}
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// defaultDeviceInfo describes device i as sriov-network-device-plugin
// describes a netdevice VF ("pci"): the spec has no type for a kernel
// interface. The address is synthetic, in PCI domain ffff (no host enumerates
// it); bus is random per plugin, device and function count the devices.
func defaultDeviceInfo(bus byte) func(i int, id string) *nadv1.DeviceInfo {
	return func(i int, _ string) *nadv1.DeviceInfo {
		return &nadv1.DeviceInfo{
			Type: nadv1.DeviceInfoTypePCI, Version: nadv1.DeviceInfoVersion,
			Pci: &nadv1.PciDevice{PciAddress: fmt.Sprintf("ffff:%02x:%02x.%d", bus, (i>>3)&0x1f, i&7)},
		}
	}
}

// writeDevInfo writes a device's file (replacing an old one), read-only as
// the NPWG client library writes it.
func writeDevInfo(path string, info *nadv1.DeviceInfo) error {
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(path, data, 0o444)
}
