package dra

// Which DeviceClasses a claim may get nri-cni.io devices through
// (kubernetes.dra.deviceClasses). A DeviceClass's NetworkConfig wins over
// the claim's, so an admin pins values (a MAC, cni-args, an interface name)
// with a class of their own — and that binds tenants only if they cannot
// use another class, such as the base class nri-cni.io, which selects every
// device with no config. The scheduler allocates by whatever class a claim
// names; the node is the authority: at prepare, a request whose class its
// namespace may not use is refused, so the pod never gets a sandbox and the
// kubelet's Event names the claim, the request, the class and the key.
// deploy/base's dra-class-policy.yaml says the same at admission.

import (
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// ErrClassNotAllowed: a request of a DeviceClass the claim's namespace may
// not use (kubernetes.dra.deviceClasses).
var ErrClassNotAllowed = errors.New("DeviceClass not allowed")

// requestClass returns the DeviceClass of the claim's request as the
// allocation names it: "request" (exactly) or "request/subrequest"
// (firstAvailable); "" when the spec has no such request.
func requestClass(c *resourceapi.ResourceClaim, request string) string {
	parent, sub, isSub := strings.Cut(request, "/")
	for _, r := range c.Spec.Devices.Requests {
		if r.Name != parent {
			continue
		}
		if !isSub {
			if r.Exactly != nil {
				return r.Exactly.DeviceClassName
			}
			return ""
		}
		for _, s := range r.FirstAvailable {
			if s.Name == sub {
				return s.DeviceClassName
			}
		}
	}
	return ""
}

// checkClass refuses a request of a class the claim's namespace may not
// use; where names the request.
func (d *Driver) checkClass(where string, c *resourceapi.ResourceClaim, request string) error {
	if err := d.o.Config.ClassAllowed(c.Namespace, requestClass(c, request)); err != nil {
		return fmt.Errorf("%s: %w: %w", where, ErrClassNotAllowed, err)
	}
	return nil
}
