// Package deviceplugin is a fake kubelet device plugin for tests (API
// k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1). It advertises Count devices
// of one extended resource (vendor.example/res); each device ID names an
// interface it creates (dummy or veth, unique on the host) in a network
// namespace, so a CNI plugin such as host-device can move the allocated one
// into the pod (veth by default: its peer <ID>p stays behind). It registers with the kubelet on <Dir>/kubelet.sock and
// serves on its own socket in Dir, answers Allocate as
// sriov-network-device-plugin does (PCIDEVICE_<RESOURCE>=id,id and an
// _INFO variable), writes the NPWG Device Information file of every device
// (spec v1.1.0: <DevInfoDir>/dp/<resource>-<id>-device.json), registers again
// when the kubelet restarts, and on Stop removes its socket, files and
// interfaces.
//
// The kubelet's device-plugin directory is fixed, /var/lib/kubelet/device-plugins,
// whatever its --root-dir (pkg/kubelet/cm/devicemanager uses
// v1beta1.KubeletSocket), and a starting kubelet removes every socket in it.
package deviceplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Config of a fake device plugin.
type Config struct {
	// ResourceName is the extended resource, e.g. vendor.example/res. Required.
	ResourceName string
	// Count is how many devices it advertises (1–256). Required.
	Count int
	// Dir is the kubelet's device-plugin directory (kubelet.sock there; the
	// plugin's socket too). "" = /var/lib/kubelet/device-plugins.
	Dir string
	// Links backs each device with an interface; "" = LinkVeth (works on
	// kernels built without CONFIG_DUMMY, such as this project's CI's).
	Links LinkKind
	// NetNS is the namespace the interfaces are made in; "" = the caller's
	// (the host's).
	NetNS string
	// IDPrefix starts every device ID; "" = "fdp". IDs are
	// IDPrefix + 6 random hex digits + index (zero-padded: sorted = index order).
	IDPrefix string
	// DevInfoDir is the Device Information root; "" = DefaultDevInfoDir.
	DevInfoDir string
	// DeviceInfo, if set, is the content of device i's file; default: a "pci"
	// record with a synthetic address (see defaultDeviceInfo).
	DeviceInfo func(i int, id string) *nadv1.DeviceInfo
	// NoReregister: do not watch Dir for a restarted kubelet.
	NoReregister bool
}

// Allocation is one Allocate call: the device IDs per container request.
type Allocation struct {
	Containers [][]string
}

// AnnotationPrefix: Allocate puts a container annotation
// AnnotationPrefix + <resource with "/" as "_"> = the device IDs.
const AnnotationPrefix = "fake-device-plugin.nri-cni.io/"

// Plugin is a running fake device plugin.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	cfg      Config
	ids      []string
	infos    map[string]*nadv1.DeviceInfo
	socket   string // our socket, in cfg.Dir
	srv      *grpc.Server
	stopped  chan struct{}
	stopOnce sync.Once
	watchWG  sync.WaitGroup

	// mu guards the fields below.
	mu          sync.Mutex
	healthy     map[string]bool
	changed     chan struct{} // closed (and replaced) when health changes
	allocations []Allocation
	registered  int
	lastErr     error // of the last re-registration
}

// Start creates the devices' interfaces and Device Information files, serves
// the plugin's socket and registers with the kubelet. On error it undoes
// what it did.
func Start(ctx context.Context, cfg Config) (p *Plugin, err error) {
	if cfg.ResourceName == "" || !strings.Contains(cfg.ResourceName, "/") {
		return nil, fmt.Errorf("device plugin: resource name %q: want an extended resource such as vendor.example/res", cfg.ResourceName)
	}
	if cfg.Count < 1 || cfg.Count > 256 {
		return nil, fmt.Errorf("device plugin %s: Count %d: want 1 to 256", cfg.ResourceName, cfg.Count)
	}
	if cfg.Dir == "" {
		cfg.Dir = pluginapi.DevicePluginPath
	}
	if cfg.Links == "" {
		cfg.Links = LinkVeth
	}
	if cfg.IDPrefix == "" {
		cfg.IDPrefix = "fdp"
	}
	if cfg.DevInfoDir == "" {
		cfg.DevInfoDir = DefaultDevInfoDir
	}
	if cfg.DeviceInfo == nil {
		cfg.DeviceInfo = defaultDeviceInfo(byte(rand.N(256)))
	}
	ids, err := newIDs(cfg.IDPrefix, cfg.Count, cfg.Links)
	if err != nil {
		return nil, fmt.Errorf("device plugin %s: %w", cfg.ResourceName, err)
	}
	p = &Plugin{
		cfg: cfg, ids: ids, infos: map[string]*nadv1.DeviceInfo{}, healthy: map[string]bool{},
		changed: make(chan struct{}), stopped: make(chan struct{}),
		socket: filepath.Join(cfg.Dir, "fake-"+strings.NewReplacer("/", "_", ".", "_").Replace(cfg.ResourceName)+"-"+ids[0]+".sock"),
	}
	if err := createLinks(cfg.Links, cfg.NetNS, ids); err != nil {
		return nil, fmt.Errorf("device plugin %s: %w", cfg.ResourceName, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Stop())
		}
	}()
	for i, id := range ids {
		p.healthy[id] = true
		p.infos[id] = cfg.DeviceInfo(i, id)
		if err := writeDevInfo(DevInfoPath(cfg.DevInfoDir, cfg.ResourceName, id), p.infos[id]); err != nil {
			return p, fmt.Errorf("device plugin %s: device info: %w", cfg.ResourceName, err)
		}
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	if err := p.serve(); err != nil {
		return p, err
	}
	if err := p.Register(ctx); err != nil {
		return p, err
	}
	if !cfg.NoReregister {
		if err := p.watchKubelet(); err != nil {
			return p, err
		}
	}
	return p, nil
}

// serve listens on the plugin's socket (again, after a kubelet restart
// removed it) and serves it.
func (p *Plugin) serve() error {
	if err := os.MkdirAll(p.cfg.Dir, 0o750); err != nil {
		return fmt.Errorf("device plugin %s: %w", p.cfg.ResourceName, err)
	}
	_ = os.Remove(p.socket)
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("device plugin %s: %w", p.cfg.ResourceName, err)
	}
	go func() { _ = p.srv.Serve(l) }()
	return nil
}

// Register registers with the kubelet (Start does; so does a kubelet restart).
func (p *Plugin) Register(ctx context.Context) error {
	kubelet := filepath.Join(p.cfg.Dir, filepath.Base(pluginapi.KubeletSocket))
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		return fmt.Errorf("device plugin %s: %w", p.cfg.ResourceName, err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(p.socket), ResourceName: p.cfg.ResourceName,
		Options: &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("device plugin %s: registering with %s: %w", p.cfg.ResourceName, kubelet, err)
	}
	p.mu.Lock()
	p.registered++
	p.mu.Unlock()
	return nil
}

// DeviceIDs are the devices' IDs (= interface names), in index order, which
// is also their sorted order.
func (p *Plugin) DeviceIDs() []string { return slices.Clone(p.ids) }

// Socket is the plugin's socket.
func (p *Plugin) Socket() string { return p.socket }

// Config is the configuration with defaults filled in.
func (p *Plugin) Config() Config { return p.cfg }

// DevInfoPath is the Device Information file of device id.
func (p *Plugin) DevInfoPath(id string) string {
	return DevInfoPath(p.cfg.DevInfoDir, p.cfg.ResourceName, id)
}

// Allocations are the Allocate calls so far.
func (p *Plugin) Allocations() []Allocation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.allocations)
}

// Registrations counts successful registrations with the kubelet, and the
// error of the last failed re-registration (nil if none).
func (p *Plugin) Registrations() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registered, p.lastErr
}

// SetHealthy changes a device's health; ListAndWatch streams the new list.
func (p *Plugin) SetHealthy(id string, healthy bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.healthy[id]; !ok {
		return fmt.Errorf("device plugin %s: no device %q", p.cfg.ResourceName, id)
	}
	p.healthy[id] = healthy
	close(p.changed)
	p.changed = make(chan struct{})
	return nil
}

// Stop stops serving (ListAndWatch streams end) and removes the plugin's
// socket, its Device Information files and its interfaces (those a CNI
// plugin moved into a pod are not in the namespace any more, and stay).
func (p *Plugin) Stop() error {
	var errs []error
	p.stopOnce.Do(func() {
		close(p.stopped)
		if p.srv != nil {
			p.srv.Stop()
		}
		p.watchWG.Wait()
		if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		for _, id := range p.ids {
			if err := os.Remove(p.DevInfoPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if err := deleteLinks(p.cfg.Links, p.cfg.NetNS, p.ids); err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

func (p *Plugin) devices() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	devs := make([]*pluginapi.Device, 0, len(p.ids))
	for _, id := range p.ids {
		h := pluginapi.Healthy
		if !p.healthy[id] {
			h = pluginapi.Unhealthy
		}
		devs = append(devs, &pluginapi.Device{ID: id, Health: h})
	}
	return devs, p.changed
}

// GetDevicePluginOptions: no PreStartContainer, no preferred allocation.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices, then again at every health change, until
// the kubelet goes or the plugin stops.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		devs, changed := p.devices()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		case <-p.stopped:
			return nil
		}
	}
}

// Allocate answers as sriov-network-device-plugin does: per container,
// PCIDEVICE_<RESOURCE>=<ids, comma-separated> and PCIDEVICE_<RESOURCE>_INFO
// (a JSON object: id → {"netdev": {"interface": id}}), plus an annotation.
// It rewrites a device's Information file if it is gone.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	var alloc Allocation
	for _, cr := range req.GetContainerRequests() {
		ids := cr.GetDevicesIds()
		info := map[string]map[string]map[string]string{}
		for _, id := range ids {
			devInfo, ok := p.infos[id]
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "device plugin %s: no device %q", p.cfg.ResourceName, id)
			}
			path := p.DevInfoPath(id)
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				if err := writeDevInfo(path, devInfo); err != nil {
					return nil, status.Errorf(codes.Internal, "device plugin %s: %v", p.cfg.ResourceName, err)
				}
			}
			info[id] = map[string]map[string]string{"netdev": {"interface": id}}
		}
		infoJSON, err := json.Marshal(info)
		if err != nil {
			return nil, err
		}
		env := EnvName(p.cfg.ResourceName)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{env: strings.Join(ids, ","), env + "_INFO": string(infoJSON)},
			Annotations: map[string]string{
				AnnotationPrefix + strings.ReplaceAll(p.cfg.ResourceName, "/", "_"): strings.Join(ids, ","),
			},
		})
		alloc.Containers = append(alloc.Containers, slices.Clone(ids))
	}
	p.mu.Lock()
	p.allocations = append(p.allocations, alloc)
	p.mu.Unlock()
	return resp, nil
}

// PreStartContainer is not asked for (GetDevicePluginOptions); it answers empty.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
