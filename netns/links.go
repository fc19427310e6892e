package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// SetLinksUp sets the named interfaces of the network namespace at path up
// (up) or down: a quarantine of interfaces whose MultiNetworkPolicy rules
// could not be programmed, and its end. Before an interface goes down its
// IPv6 keep_addr_on_down is set, so that its IPv6 addresses survive (the
// kernel flushes them otherwise; IPv4 addresses stay anyway). Routes via a
// gateway through it do not survive: the kernel deletes them. An
// interface that is not there (removed meanwhile) is skipped; every other
// failure is returned, naming the interface, after the others were tried.
func SetLinksUp(path string, ifnames []string, up bool) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error {
		var errs []error
		for _, name := range ifnames {
			link, err := netlink.LinkByName(name)
			var missing netlink.LinkNotFoundError
			if errors.As(err, &missing) {
				continue
			}
			if err == nil {
				if up {
					err = netlink.LinkSetUp(link)
				} else if err = keepAddrOnDown(name); err == nil {
					err = netlink.LinkSetDown(link)
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("interface %s: %w", name, err))
			}
		}
		return errors.Join(errs...)
	})
}

// keepAddrOnDown sets the interface's IPv6 keep_addr_on_down (the calling
// thread is in its namespace); without IPv6 there is nothing to keep.
func keepAddrOnDown(ifname string) error {
	err := os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", ifname, "keep_addr_on_down"), []byte("1"), 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
