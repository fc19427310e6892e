// Package dra is nri-cni's DRA driver (driver nri-cni.io): networks as
// ResourceClaims. It registers with the kubelet through
// k8s.io/dynamic-resource-allocation's kubelet plugin helper, publishes a
// ResourceSlice whose devices are the networks this node can attach
// (inventory.go, check.go), and, when the kubelet prepares a claim,
// records which network each allocated device is and the claim's
// NetworkConfig (fast: no CNI). RunPodSandbox then attaches the pod's
// claims from those records with the rest of its networks, inside the
// runtime's deadline and without an API call; the status writer reports
// them in the claim's status.devices. Unprepare forgets the record.
package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// DriverName is the driver, the DeviceClass and the opaque config's driver.
const DriverName = "nri-cni.io"

// Errors of claims the node will not prepare; each names the claim.
var (
	ErrNotAllocated = errors.New("not allocated")
	ErrNotOwnClaim  = errors.New("not a pod's own claim")
	ErrUnknownDev   = errors.New("not a network device of this node")
	ErrAdminAccess  = errors.New("admin access to network devices is not supported")
	// ErrNotServing: nri-cni is not serving the node's runtime now; the
	// kubelet prepares the claim again later.
	ErrNotServing = errors.New("nri-cni is not serving the node's runtime, so the claim's network could not be attached to the pod (the kubelet retries)")
)

// ClaimSink is told when a claim is released (its status entries go).
type ClaimSink interface {
	ClaimReleased(namespace, name, uid string)
}

// ClaimChecker judges a claim's device against nri.conf and the node's
// networks before it is recorded (plan.Planner).
type ClaimChecker interface {
	CheckClaim(d state.ClaimDevice) error
}

// ClaimStore keeps the prepared-claim records, which planning reads at
// RunPodSandbox (state.Claims).
type ClaimStore interface {
	Put(pc *state.PreparedClaim) error
	Delete(uid string) error
	// Reconcile and Stale hold the records against the claims the
	// kubelet's checkpoint says are prepared (records.go).
	Reconcile(held []state.HeldClaim) []state.MissingClaim
	Stale(held []state.HeldClaim) []state.PreparedClaim
	Missing() []state.MissingClaim
	// CannotJudge and Unjudged: while the checkpoint cannot be read
	// (state/claimjudge.go); SaveReport keeps the report for `status`.
	CannotJudge(why string)
	Unjudged() state.Unjudged
	SaveReport(r state.CheckpointReport) error
}

// Options wire a Driver.
type Options struct {
	NodeName string
	Client   kubernetes.Interface
	Config   *config.DRAConfig
	Claims   ClaimStore
	Planner  ClaimChecker
	Sink     ClaimSink
	// Candidates returns the networks the node might publish (Catalogue).
	Candidates func() []Candidate
	Checker    Checker
	// Limits bound what one claim may ask for.
	Limits config.Limits
	Log    *logrus.Entry
	// Refresh re-checks and republishes this often (default 30 s); a
	// Kick does it at once.
	Refresh time.Duration
	// WaitFor, when set, is waited for before the first publish, at most
	// WaitTimeout (default 10 s): the NAD cache's first list. Without it a
	// restarted driver publishes the config dir's networks alone and, a
	// moment later, its NADs too: two writes per node instead of none, and
	// the NADs' devices gone from the slice in between. Without the CRD the
	// cache never syncs: the node's networks go out after WaitTimeout.
	WaitFor     func(ctx context.Context) error
	WaitTimeout time.Duration
	// Serving, when set, says whether nri-cni serves the node's runtime
	// (connected to its NRI socket and synchronized). A claim is prepared
	// only while it does: the pod's sandbox must not start with nri-cni
	// away, or its containers would start without the claim's network.
	Serving func() error
	// PublishOnly publishes the ResourceSlice through a ResourceSlice
	// controller of the driver's own (publisher.go) instead of registering
	// with the kubelet, whose plugin helper would run the same controller:
	// the same slices, but no kubelet prepares claims. For a fleet
	// simulated without kubelets (test/fleet).
	PublishOnly bool
	// Publishing bounds refreshes and publishes (publishing.go); Reporter,
	// when set, hears what each refresh leaves out.
	Publishing PublishLimits
	Reporter   Reporter
}

// Driver is the DRA driver. Safe for concurrent use.
type Driver struct {
	o    Options
	pub  publisher // the kubelet plugin helper, or a slicePublisher
	kick chan struct{}

	mu       sync.Mutex // guards multiple, inv, started
	multiple bool       // devices allow multiple allocations (else slots)
	inv      Inventory
	pubs     publishing // publishing.go
}

// New returns a driver; Start registers it.
func New(o Options) *Driver {
	if o.Refresh <= 0 {
		o.Refresh = 30 * time.Second
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = 10 * time.Second
	}
	d := &Driver{o: o, kick: make(chan struct{}, 1)}
	d.multiple = o.Config.SharingMode() != config.SharingSlots
	return d
}

// Kick asks for a re-check and republish (a NAD or config changed). It
// never blocks.
func (d *Driver) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Start computes the inventory, registers with the kubelet (the kubelet
// may prepare claims from then on), publishes the ResourceSlice and keeps
// it current until ctx ends.
func (d *Driver) Start(ctx context.Context) error {
	if d.o.Config.SharingMode() == config.SharingAuto {
		d.probeMultiple(ctx)
	}
	if d.o.WaitFor != nil {
		wctx, cancel := context.WithTimeout(ctx, d.o.WaitTimeout)
		if err := d.o.WaitFor(wctx); err != nil && ctx.Err() == nil {
			d.o.Log.WithError(err).WithField("waited", d.o.WaitTimeout).
				Warn("DRA: publishing the ResourceSlice without the NADs for now; they follow once their cache has synced")
		}
		cancel()
	}
	d.refresh()
	if d.o.PublishOnly {
		d.pub = newSlicePublisher(ctx, d.o.Client, d.o.NodeName, d.HandleError)
	} else {
		h, err := d.register(ctx)
		if err != nil {
			return err
		}
		d.pub = h
	}
	if err := d.publish(ctx); err != nil {
		d.pub.Stop()
		return err
	}
	go d.run(ctx)
	return nil
}

// register starts the kubelet plugin helper: the driver's sockets in the
// kubelet's plugin dirs (the kubelet prepares claims through them from
// then on) and, at the first publish, its ResourceSlice controller.
func (d *Driver) register(ctx context.Context) (*kubeletplugin.Helper, error) {
	root := d.o.Config.KubeletRoot()
	registrar, data := filepath.Join(root, "plugins_registry"), filepath.Join(root, "plugins", DriverName)
	for _, dir := range []string{registrar, data} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("DRA driver %s: %w", DriverName, err)
		}
	}
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.NodeName(d.o.NodeName),
		kubeletplugin.KubeClient(d.o.Client),
		kubeletplugin.RegistrarDirectoryPath(registrar),
		kubeletplugin.PluginDataDirectoryPath(data),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return nil, fmt.Errorf("DRA driver %s: %w", DriverName, err)
	}
	return h, nil
}

// probeMultiple asks the API server, before the first publish, whether it
// keeps allowMultipleAllocations (KEP-5075, DRAConsumableCapacity): a
// dry-run create of a one-device slice of this node. Without it the first
// slice would publish one device per network that the API server strips to
// a one-claim device, and the scheduler could allocate it before the
// dropped-field fallback (HandleError) switches to slots. On any error the
// fallback stays the safety net.
func (d *Driver) probeMultiple(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := d.o.Client.ResourceV1().ResourceSlices().Create(ctx, ProbeSlice(d.o.NodeName), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		d.o.Log.WithError(err).Warn("DRA: could not ask the API server whether it keeps allowMultipleAllocations; assuming it does")
		return
	}
	if len(got.Spec.Devices) == 1 && got.Spec.Devices[0].AllowMultipleAllocations == nil {
		d.mu.Lock()
		d.multiple = false
		d.mu.Unlock()
		d.o.Log.Info("DRA: the API server does not keep allowMultipleAllocations (DRAConsumableCapacity off): publishing slots")
	}
}

// ProbeSlice is the slice probeMultiple dry-run creates: node's, in its
// pool, one device that allows multiple allocations. Exported for the
// tests of the admission policy that must let it through
// (deploy/base/dra-policy.yaml).
func ProbeSlice(node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: DriverName + "-probe-"},
		Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: ptr.To(node),
			Pool:    resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "probe", AllowMultipleAllocations: ptr.To(true)}}}}
}

// HandleError implements kubeletplugin.DRAPlugin: background errors of the
// helper (publishing). A ResourceSlice whose allowMultipleAllocations the
// API server dropped (DRAConsumableCapacity off: Kubernetes before 1.36, or
// the gate turned off) is republished as slots, with sharing "auto".
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) && droppedMultiple(dropped) {
		d.mu.Lock()
		switch {
		case d.o.Config.SharingMode() == config.SharingAuto && d.multiple:
			d.multiple = false
			d.mu.Unlock()
			d.o.Log.Warn("DRA: the API server dropped allowMultipleAllocations (DRAConsumableCapacity is off): publishing slots instead")
			d.Kick()
			return
		case d.o.Config.SharingMode() == config.SharingMultiple:
			d.mu.Unlock()
			d.o.Log.Error("DRA: kubernetes.dra.sharing is \"multiple\" but the API server dropped allowMultipleAllocations " +
				"(DRAConsumableCapacity is off): each network can serve one claim; use sharing auto or slots")
			return
		}
		d.mu.Unlock()
	}
	d.o.Log.WithError(err).WithField("recoverable", errors.Is(err, kubeletplugin.ErrRecoverable)).Warn("DRA: " + msg)
}

// droppedMultiple: the API server dropped allowMultipleAllocations.
func droppedMultiple(e *resourceslice.DroppedFieldsError) bool {
	if e.DesiredSlice == nil || e.ActualSlice == nil {
		return false
	}
	for i := range e.DesiredSlice.Spec.Devices {
		if i >= len(e.ActualSlice.Spec.Devices) {
			break
		}
		if e.DesiredSlice.Spec.Devices[i].AllowMultipleAllocations != nil && e.ActualSlice.Spec.Devices[i].AllowMultipleAllocations == nil {
			return true
		}
	}
	return false
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: not offered (the
// health service is off).
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Published returns the devices published now (tests, the CLI).
func (d *Driver) Published() Inventory {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inv
}
