package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// deviceID is the device of the call: runtimeConfig.deviceID (capability
// deviceID), else the config's "deviceID".
func deviceID(conf *Conf) string {
	if len(conf.RuntimeConfig) > 0 {
		var rc struct {
			DeviceID string `json:"deviceID"`
		}
		if err := json.Unmarshal(conf.RuntimeConfig, &rc); err == nil && rc.DeviceID != "" {
			return rc.DeviceID
		}
	}
	return conf.DeviceID
}

// moveDevice moves the link named as the device from the plugin's netns
// (the host's) into the pod's as ifname, sets it up and returns it as the
// result reports it.
func moveDevice(conf *Conf, a *skel.CmdArgs) (*current.Interface, error) {
	id := deviceID(conf)
	if id == "" {
		return nil, fmt.Errorf("cni-recorder: moveDevice: no deviceID (runtimeConfig.deviceID or the config's deviceID)")
	}
	if a.Netns == "" {
		return nil, fmt.Errorf("cni-recorder: moveDevice: ADD without a netns")
	}
	podNS, err := ns.GetNS(a.Netns)
	if err != nil {
		return nil, fmt.Errorf("cni-recorder: moveDevice: %w", err)
	}
	defer podNS.Close()
	link, err := netlink.LinkByName(id)
	if err != nil {
		return nil, fmt.Errorf("cni-recorder: moveDevice: device %s on the host: %w", id, err)
	}
	if err := netlink.LinkSetDown(link); err != nil {
		return nil, fmt.Errorf("cni-recorder: moveDevice: %s down: %w", id, err)
	}
	if err := netlink.LinkSetNsFd(link, int(podNS.Fd())); err != nil {
		return nil, fmt.Errorf("cni-recorder: moveDevice: moving %s into %s: %w", id, a.Netns, err)
	}
	var itf *current.Interface
	err = podNS.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(id)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetName(l, a.IfName); err != nil {
			return fmt.Errorf("renaming %s to %s: %w", id, a.IfName, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("%s up: %w", a.IfName, err)
		}
		if l, err = netlink.LinkByName(a.IfName); err != nil {
			return err
		}
		itf = &current.Interface{Name: a.IfName, Mac: l.Attrs().HardwareAddr.String(), Sandbox: a.Netns}
		return nil
	})
	if err != nil {
		// Give it back, as a failed ADD of a real device plugin's CNI does.
		return nil, errors.Join(fmt.Errorf("cni-recorder: moveDevice: %s in %s: %w", id, a.Netns, err),
			giveBack(podNS, id, id), giveBack(podNS, a.IfName, id))
	}
	return itf, nil
}

// returnDevice is moveDevice's DEL: ifname in the pod's netns back to the
// host as the device. Nothing there (no netns, namespace gone, link gone)
// is success.
func returnDevice(conf *Conf, a *skel.CmdArgs) error {
	if a.Netns == "" {
		return nil
	}
	podNS, err := ns.GetNS(a.Netns)
	if err != nil {
		var notExist ns.NSPathNotExistErr
		var notNS ns.NSPathNotNSErr
		if errors.As(err, &notExist) || errors.As(err, &notNS) {
			return nil
		}
		return fmt.Errorf("cni-recorder: moveDevice: %w", err)
	}
	defer podNS.Close()
	if err := giveBack(podNS, a.IfName, deviceID(conf)); err != nil {
		return fmt.Errorf("cni-recorder: moveDevice: %w", err)
	}
	return nil
}

// giveBack renames the link name of podNS to id and moves it into the
// caller's netns (the host's); no such link is success.
func giveBack(podNS ns.NetNS, name, id string) error {
	host, err := ns.GetCurrentNS()
	if err != nil {
		return err
	}
	defer host.Close()
	return podNS.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			if errors.As(err, &netlink.LinkNotFoundError{}) {
				return nil
			}
			return err
		}
		if id == "" {
			return fmt.Errorf("%s in %s: no deviceID to give it back as", name, podNS.Path())
		}
		if err := netlink.LinkSetDown(l); err != nil {
			return fmt.Errorf("%s down: %w", name, err)
		}
		if name != id {
			if err := netlink.LinkSetName(l, id); err != nil {
				return fmt.Errorf("renaming %s to %s: %w", name, id, err)
			}
		}
		if err := netlink.LinkSetNsFd(l, int(host.Fd())); err != nil {
			return fmt.Errorf("moving %s back to the host: %w", id, err)
		}
		return nil
	})
}
