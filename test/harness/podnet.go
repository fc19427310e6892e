package harness

import (
	"fmt"
	"net"
	"os/exec"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Iface is one interface seen inside a pod.
type Iface struct {
	Name  string
	MAC   string
	Addrs []net.IPNet // IPv4
}

// PodIface returns ifname inside the netns at path; ok is false if absent.
func PodIface(nsPath, ifname string) (Iface, bool, error) {
	var out Iface
	found := false
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			if _, notFound := err.(netlink.LinkNotFoundError); notFound {
				return nil
			}
			return err
		}
		found = true
		out.Name, out.MAC = ifname, l.Attrs().HardwareAddr.String()
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, a := range addrs {
			out.Addrs = append(out.Addrs, *a.IPNet)
		}
		return err
	})
	return out, found, err
}

// Ping sends one ICMP echo from inside the netns at nsPath to ip (busybox
// ping, from Debian's busybox-static), so the traffic stays between the
// test's own namespaces.
func Ping(nsPath string, ip net.IP) error {
	out, err := exec.Command("nsenter", "--net="+nsPath, "busybox", "ping", "-c", "1", "-W", "2", ip.String()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from %s: %w\n%s", ip, nsPath, err, out)
	}
	return nil
}

// BridgePorts counts the interfaces enslaved to the bridge (0 if absent).
func BridgePorts(bridge string) (int, error) {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return 0, nil //nolint:nilerr // no bridge, no ports
	}
	links, err := netlink.LinkList()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			n++
		}
	}
	return n, nil
}
