// Package podresourcestest is a fake kubelet PodResources server for tests:
// the real gRPC service (k8s.io/kubelet/pkg/apis/podresources/v1) on a unix
// socket, answering from pods the test sets, the way the kubelet answers:
// a container's devices one entry per device (and NUMA node) in random
// order, Get for an unknown pod as codes.Unknown "pod … not found", Get
// unsupported as older kubelets say it, and the kubelet's rate limit (a
// token bucket checked before each call, ResourceExhausted "rejected by rate
// limit" at once) when asked. It counts the calls it answers.
package podresourcestest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"
)

// The kubelet's rate limit of the PodResources service (v1.37.2:
// pkg/kubelet/apis/podresources/constants.go).
const (
	KubeletQPS   = 100
	KubeletBurst = 10
)

// GetMode is how the fake answers Get.
type GetMode int

const (
	GetServed        GetMode = iota // 1.34+ (Get on by default)
	GetDisabled                     // 1.27–1.33 with the gate off: codes.Unknown "PodResources API Get method disabled"
	GetUnimplemented                // before 1.27: codes.Unimplemented
)

// Options configure a Server.
type Options struct {
	// Dir holds the socket (kubelet.sock). Required; keep it short (unix
	// socket paths are limited to 107 bytes).
	Dir     string
	GetMode GetMode
	// QPS > 0: the kubelet's rate limiter with Burst (KubeletQPS, KubeletBurst).
	QPS   float64
	Burst int
	// Latency: every answer takes at least this long.
	Latency time.Duration
	// Ordered: list devices in the order set (no shuffling).
	Ordered bool
}

// Server is a running fake.
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	Socket string

	o       Options
	srv     *grpc.Server
	limiter *rate.Limiter
	gets    atomic.Int64
	lists   atomic.Int64
	limited atomic.Int64

	mu   sync.Mutex
	pods []*podresourcesv1.PodResources
	fail func(method string) error
	hold chan struct{} // non-nil: answers wait until closed
}

// Start serves on <Dir>/kubelet.sock until Stop.
func Start(o Options) (*Server, error) {
	s := &Server{o: o, Socket: filepath.Join(o.Dir, "kubelet.sock")}
	if err := os.Remove(s.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", s.Socket)
	if err != nil {
		return nil, err
	}
	if o.QPS > 0 {
		s.limiter = rate.NewLimiter(rate.Limit(o.QPS), o.Burst)
	}
	s.srv = grpc.NewServer(grpc.UnaryInterceptor(s.intercept))
	podresourcesv1.RegisterPodResourcesListerServer(s.srv, s)
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Stop stops serving and removes the socket.
func (s *Server) Stop() {
	s.srv.Stop()
	_ = os.Remove(s.Socket)
}

// SetPods replaces the pods the kubelet knows.
func (s *Server) SetPods(pods ...*podresourcesv1.PodResources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

// AddPod adds a pod (a second one of the same name too, as the kubelet may
// list an old pod beside its replacement).
func (s *Server) AddPod(p *podresourcesv1.PodResources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = append(s.pods, p)
}

// Fail makes every call first ask f (method "Get" or "List"); an error it
// returns is the answer. nil: no injected failures.
func (s *Server) Fail(f func(method string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = f
}

// Hold makes answers wait until release is called (calls are counted when
// they arrive).
func (s *Server) Hold() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.hold = nil
			s.mu.Unlock()
			close(ch)
		})
	}
}

// Calls returns how many Get and List calls arrived (rate-limited ones too).
func (s *Server) Calls() (gets, lists int) { return int(s.gets.Load()), int(s.lists.Load()) }

// RateLimited returns how many calls the rate limiter refused.
func (s *Server) RateLimited() int { return int(s.limited.Load()) }

func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	method := filepath.Base(info.FullMethod)
	switch method {
	case "Get":
		s.gets.Add(1)
	case "List":
		s.lists.Add(1)
	}
	if s.limiter != nil && !s.limiter.Allow() {
		s.limited.Add(1)
		return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
	}
	s.mu.Lock()
	fail, hold := s.fail, s.hold
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if s.o.Latency > 0 {
		time.Sleep(s.o.Latency)
	}
	if fail != nil {
		if err := fail(method); err != nil {
			return nil, err
		}
	}
	return h(ctx, req)
}

// List answers every pod.
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range s.pods {
		resp.PodResources = append(resp.PodResources, s.asKubelet(p))
	}
	return resp, nil
}

// Get answers one pod, the first of that name.
func (s *Server) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	switch s.o.GetMode {
	case GetDisabled:
		return nil, errors.New("PodResources API Get method disabled")
	case GetUnimplemented:
		return nil, status.Error(codes.Unimplemented, "method Get not implemented")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pods {
		if p.GetNamespace() == req.GetPodNamespace() && p.GetName() == req.GetPodName() {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: s.asKubelet(p)}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
}

// asKubelet lists p's devices as the kubelet does: one entry per device ID
// and NUMA node, in random order (unless Ordered).
func (s *Server) asKubelet(p *podresourcesv1.PodResources) *podresourcesv1.PodResources {
	out := &podresourcesv1.PodResources{Name: p.GetName(), Namespace: p.GetNamespace()}
	for _, c := range p.GetContainers() {
		oc := &podresourcesv1.ContainerResources{Name: c.GetName(), DynamicResources: c.GetDynamicResources()}
		for _, d := range c.GetDevices() {
			for _, id := range d.GetDeviceIds() {
				nodes := d.GetTopology().GetNodes()
				if len(nodes) == 0 {
					oc.Devices = append(oc.Devices, &podresourcesv1.ContainerDevices{ResourceName: d.GetResourceName(), DeviceIds: []string{id}})
				}
				for _, n := range nodes {
					oc.Devices = append(oc.Devices, &podresourcesv1.ContainerDevices{ResourceName: d.GetResourceName(), DeviceIds: []string{id},
						Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: n.GetID()}}}})
				}
			}
		}
		if !s.o.Ordered {
			rand.Shuffle(len(oc.Devices), func(i, j int) { oc.Devices[i], oc.Devices[j] = oc.Devices[j], oc.Devices[i] })
		}
		out.Containers = append(out.Containers, oc)
	}
	return out
}

// Pod builds a pod whose containers c0, c1, … have the devices given, one
// map (resource name → device IDs) per container.
func Pod(namespace, name string, containers ...map[string][]string) *podresourcesv1.PodResources {
	p := &podresourcesv1.PodResources{Namespace: namespace, Name: name}
	for i, devs := range containers {
		c := &podresourcesv1.ContainerResources{Name: fmt.Sprintf("c%d", i)}
		for res, ids := range devs {
			c.Devices = append(c.Devices, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: ids})
		}
		p.Containers = append(p.Containers, c)
	}
	return p
}

// Claim builds a container's DRA claim entry with one device.
func Claim(namespace, name, driver, pool, device string, cdi ...string) *podresourcesv1.DynamicResource {
	r := &podresourcesv1.ClaimResource{DriverName: driver, PoolName: pool, DeviceName: device}
	for _, n := range cdi {
		r.CdiDevices = append(r.CdiDevices, &podresourcesv1.CDIDevice{Name: n})
	}
	return &podresourcesv1.DynamicResource{ClaimName: name, ClaimNamespace: namespace, ClaimResources: []*podresourcesv1.ClaimResource{r}}
}

// Shared returns r with a share ID (a consumable-capacity device).
func Shared(r *podresourcesv1.DynamicResource, shareID string) *podresourcesv1.DynamicResource {
	for _, cr := range r.ClaimResources {
		cr.ShareId = ptr.To(shareID)
	}
	return r
}
