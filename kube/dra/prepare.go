package dra

// Prepare and unprepare: the kubelet asks the driver to prepare a pod's
// claims before the sandbox (checked and recorded, no CNI) and to
// unprepare them after the pod (the record goes).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: each claim is
// checked and recorded; no CNI runs here.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	serving := d.waitServing(ctx)
	for _, c := range claims {
		devs, err := []kubeletplugin.Device(nil), serving
		if serving == nil {
			devs, err = d.prepare(c)
		}
		log := d.o.Log.WithFields(logrus.Fields{"claim": c.Name, "namespace": c.Namespace, "uid": c.UID})
		if err != nil {
			log.WithError(err).Warn("DRA: claim not prepared")
		} else {
			log.WithField("devices", len(devs)).Info("DRA: claim prepared")
		}
		out[c.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devs}
	}
	return out, nil
}

// servingWait bounds how long a prepare waits for nri-cni to serve the
// runtime (it registers with the kubelet before its NRI connection is up,
// and reconnects after a runtime restart): long enough for a (re)connect
// and its resync, short of the kubelet's call timeout. A prepare that fails
// is retried by the kubelet only at its next pod sync (60-90 s in 1.37).
const servingWait = 10 * time.Second

// waitServing waits up to servingWait for Options.Serving to say nri-cni
// serves the runtime; the error says why not.
func (d *Driver) waitServing(ctx context.Context) error {
	if d.o.Serving == nil {
		return nil
	}
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, servingWait, true, func(context.Context) (bool, error) {
		err = d.o.Serving()
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotServing, err)
	}
	return nil
}

// prepare checks one claim and records it.
func (d *Driver) prepare(c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	where := fmt.Sprintf("ResourceClaim %s/%s", c.Namespace, c.Name)
	alloc := c.Status.Allocation
	if alloc == nil {
		return nil, fmt.Errorf("%s: %w", where, ErrNotAllocated)
	}
	pod, err := ownPod(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	pc := &state.PreparedClaim{UID: string(c.UID), Namespace: c.Namespace, Name: c.Name, Pods: []string{pod},
		Prepared: time.Now().UTC()}
	var devs []kubeletplugin.Device
	for _, r := range alloc.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		ref := state.ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID), Request: r.Request,
			Driver: r.Driver, Pool: r.Pool, Device: r.Device}
		if r.ShareID != nil {
			ref.ShareID = string(*r.ShareID)
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			return nil, fmt.Errorf("%s: %w", ref.Where(), ErrAdminAccess)
		}
		if err := d.checkClass(ref.Where(), c, r.Request); err != nil {
			return nil, err
		}
		network, ok := d.network(r.Pool, r.Device)
		if !ok {
			return nil, fmt.Errorf("%s: %w (pool %q): it is no longer published (the network or its NetworkAttachmentDefinition changed)",
				ref.Where(), ErrUnknownDev, r.Pool)
		}
		dev := state.ClaimDevice{Ref: ref, Network: network, Configs: configsFor(alloc.Devices.Config, r.Request)}
		if err := d.o.Planner.CheckClaim(dev); err != nil {
			return nil, err
		}
		pc.Devices = append(pc.Devices, dev)
		devs = append(devs, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			ShareID: r.ShareID})
	}
	if max := d.o.Limits.MaxNetworksPerPod; len(pc.Devices) > max {
		return nil, fmt.Errorf("%s: %d network devices, more than %s (%d)", where, len(pc.Devices), config.MaxNetworksPerPodKey, max)
	}
	if err := d.o.Claims.Put(pc); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return devs, nil
}

// ownPod returns the UID of the one pod the claim is reserved for, which
// must own it (a claim made from the pod's ResourceClaimTemplate). The
// kubelet prepares a claim once per node: a pod that started sharing it
// later would never be seen, and would start without the network.
func ownPod(c *resourceapi.ResourceClaim) (string, error) {
	var pods []string
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			pods = append(pods, string(r.UID))
		}
	}
	if len(pods) != 1 {
		return "", fmt.Errorf("%w: reserved for %d pods; a network claim attaches one pod: make it from the pod's ResourceClaimTemplate", ErrNotOwnClaim, len(pods))
	}
	for _, o := range c.OwnerReferences {
		if o.Kind == "Pod" && o.APIVersion == "v1" && string(o.UID) == pods[0] && o.Controller != nil && *o.Controller {
			return pods[0], nil
		}
	}
	return "", fmt.Errorf("%w: it is not owned by the pod it is reserved for; a network claim attaches one pod: make it from the pod's ResourceClaimTemplate (spec.resourceClaims[].resourceClaimTemplateName)", ErrNotOwnClaim)
}

// configsFor returns the opaque configs of driver nri-cni.io that apply to
// request (a "request/subrequest" matches configs of either), the class's
// and the claim's, in allocation order.
func configsFor(configs []resourceapi.DeviceAllocationConfiguration, request string) []state.ClaimConfig {
	parent, _, _ := strings.Cut(request, "/")
	var out []state.ClaimConfig
	for _, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != DriverName {
			continue
		}
		if len(c.Requests) > 0 && !slices.Contains(c.Requests, request) && !slices.Contains(c.Requests, parent) {
			continue
		}
		out = append(out, state.ClaimConfig{FromClass: c.Source == resourceapi.AllocationConfigSourceClass,
			Raw: slices.Clone(c.Opaque.Parameters.Raw)})
	}
	return out
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: the record
// goes (the pod's attachments were torn down with its sandbox) and so do
// nri-cni's entries in the claim's status.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.o.Claims.Delete(string(c.UID))
		out[c.UID] = err
		if err == nil {
			if d.o.Sink != nil {
				d.o.Sink.ClaimReleased(c.Namespace, c.Name, string(c.UID))
			}
			d.o.Log.WithFields(logrus.Fields{"claim": c.Name, "namespace": c.Namespace, "uid": c.UID}).Info("DRA: claim unprepared")
		}
	}
	return out, nil
}
