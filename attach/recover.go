package attach

// Teardown without a usable record, and records rebuilt from libcni's
// cache. A record can be missing (nri-cni started after the sandbox) or
// unreadable (a power loss leaves an empty file) while its attachments
// live on in libcni's cache, which nri-cni shares with the runtime's own
// network. What nri-cni ADDed carries its ownership marker (cni.OwnerKey,
// with the NetworkAttachmentDefinition it came from); attachments cached
// before the marker existed are recognised by the older rule (a confDir
// network on an interface nri-cni could have named).

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/state"
)

// delCached DELs what libcni's cache holds for id, limited to nri-cni's own
// attachments (oursFilter).
func (o *ops) delCached(ctx context.Context, log *logrus.Entry, id, nsPath string) error {
	atts, err := o.engine.CachedAttachments(id)
	if err != nil {
		return nil //nolint:nilerr // no readable cache: nothing we could DEL
	}
	ours := o.oursFilter()
	var errs []error
	for _, att := range atts {
		if _, ok := ours(att); !ok {
			continue
		}
		err := o.del(ctx, att.Network, cni.Attachment{ContainerID: id, IfName: att.IfName, Netns: nsPath})
		l := log.WithFields(logrus.Fields{"network": att.Network, "ifname": att.IfName})
		if err != nil {
			l.WithError(err).Error("CNI DEL of a cached attachment failed")
			errs = append(errs, err)
			continue
		}
		l.Info("cached attachment detached")
	}
	return errors.Join(errs...)
}

// oursFilter returns a test for whether a cached attachment is nri-cni's,
// and its origin: marked by nri-cni (cni.OwnerOf); or, cached before the
// marker, a network loaded from confDir on an interface nri-cni could have
// named — <ifnamePrefix><n>, or with podSelection or the NPWG annotation
// any name a pod may choose. Never eth0 or lo: the runtime's.
func (o *ops) oursFilter() func(att *libcni.NetworkAttachment) (cni.Owner, bool) {
	nets := map[string]bool{}
	for _, n := range o.engine.Networks() {
		nets[n.Name] = true
	}
	podNamed := o.planner.PodNamed()
	return func(att *libcni.NetworkAttachment) (cni.Owner, bool) {
		if att.IfName == "eth0" || att.IfName == "lo" {
			return cni.Owner{}, false
		}
		if o, ok := cni.OwnerOf(att.Config); ok {
			return o, true
		}
		if !nets[att.Network] {
			return cni.Owner{}, false
		}
		return cni.Owner{}, podNamed || o.planner.AutoIfname(att.IfName)
	}
}

// rebuild makes a record of id from libcni's cache: nri-cni's attachments
// of it, with their networks (and NetworkAttachmentDefinitions), interface
// names, addresses, netns and pod identity. It is attached (every cached
// ADD completed); its Created is the damaged record file's time.
func (o *ops) rebuild(id string) (*state.Record, error) {
	atts, err := o.engine.CachedAttachments(id)
	if err != nil {
		return nil, fmt.Errorf("reading libcni's cache: %w", err)
	}
	created, err := o.store.Modified(id)
	if err != nil {
		return nil, err
	}
	rec := &state.Record{ID: id, Kind: "container", Phase: state.PhaseAttached, Created: created, Updated: created}
	ours := o.oursFilter()
	for _, att := range atts {
		owner, ok := ours(att)
		if !ok {
			continue
		}
		n := state.Network{Name: att.Network, IfName: att.IfName, NAD: owner.NAD}
		if res, err := o.engine.CachedResult(att); err == nil {
			fromResult(&n, res)
		}
		rec.Networks = append(rec.Networks, n)
		if rec.Netns == "" {
			rec.Netns = att.NetNS
		}
		for _, kv := range att.CniArgs {
			switch kv[0] {
			case "K8S_POD_NAMESPACE":
				rec.Namespace = kv[1]
			case "K8S_POD_NAME":
				rec.Name = kv[1]
			case "K8S_POD_UID":
				rec.UID = kv[1]
			case "K8S_POD_INFRA_CONTAINER_ID":
				if kv[1] == id {
					rec.Kind = "pod"
				}
			}
		}
	}
	if rec.Netns != "" {
		if ns, err := o.ns.Check(rec.Netns); err == nil {
			rec.NetnsDev, rec.NetnsIno = ns.ID.Dev, ns.ID.Ino
		}
	}
	return rec, nil
}
