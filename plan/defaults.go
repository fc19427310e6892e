package plan

// nri.conf's defaultNetworks: attached to every pod nri-cni serves, before
// whatever else it gets, as Multus adds its defaultNetworks to every pod
// before the annotation's. Multus names its delegates by position — the
// cluster network eth0, then the default networks net1…netK, then the
// annotation's elements net(K+1)… — and so does nri-cni: default network i
// gets <ifnamePrefix><i>, and an element without an interface is numbered
// after them. The limit (limits.maxNetworksPerPod) counts them. A pod
// cannot opt out of them (an empty annotation opts it out of the
// annotation's networks only); defaultNetworksExclude and namespaces.* can.
// While Multus is the node's primary network they are not attached: Multus
// serves the pod there, its own defaultNetworks included, and would hold
// their interface names.

import (
	"errors"
	"fmt"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
)

// defaults returns the default network attachments of a pod of namespace
// ns (none in an excluded namespace, or while Multus is the primary
// network), named <ifnamePrefix><1…K>.
func (p *Planner) defaults(ns string) ([]Attachment, error) {
	list := p.cfg.DefaultNetworksFor(ns)
	if len(list) == 0 || p.MultusPrimary() != "" {
		return nil, nil
	}
	atts := make([]Attachment, 0, len(list))
	for i, d := range list {
		where := fmt.Sprintf("nri.conf %s[%d] (%s)", config.DefaultNetworksKey, i, d)
		a := Attachment{IfName: p.cfg.Ifname(i), Default: true}
		if !d.NAD() {
			n, err := p.Local(d.Name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			a.Network = n
			atts = append(atts, a)
			continue
		}
		// The admin's choice: no namespace isolation, no pod capability.
		// The NAD is judged as every NAD is (kubernetes.nadPolicy, size).
		ref := NADRef{Namespace: d.Namespace, Name: d.Name}
		n, err := p.NAD(ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if n, _, err = p.finish(where, n, NetworkSelection{Ref: ref}, cni.Owner{NAD: ref.String()}); err != nil {
			return nil, err
		}
		a.Network, a.NAD = n, ref.String()
		atts = append(atts, a)
	}
	return atts, nil
}

// reservedNames maps the default networks' interface names to what holds
// them, for the errors of a pod that names one of them itself.
func reservedNames(defaults []Attachment) map[string]string {
	out := make(map[string]string, len(defaults))
	for i, a := range defaults {
		out[a.IfName] = fmt.Sprintf("nri.conf %s[%d] (%s)", config.DefaultNetworksKey, i, a.Name())
	}
	return out
}

// withDefaults makes a limit error of an annotation parsed within the room
// the default networks leave name the whole count and the real limit.
func withDefaults(err error, k int) error {
	var le *LimitError
	if k == 0 || !errors.As(err, &le) || le.What != "networks" {
		return err
	}
	out := *le
	out.Got += k
	out.Max += k
	out.Subject = fmt.Sprintf("annotation %s and the %d %s of nri.conf", le.Annotation, k, config.DefaultNetworksKey)
	return &out
}
