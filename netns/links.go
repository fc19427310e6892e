package netns

import (
	"errors"
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// SetLinksUp sets the named interfaces of the network namespace at path up
// (up) or down: a quarantine of interfaces whose MultiNetworkPolicy rules
// could not be programmed, and its end. An interface that is not there
// (removed meanwhile) is skipped; every other failure is returned, naming
// the interface, after the others were tried.
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
				} else {
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
