package podresources_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nri-cni/nri-cni/kube/podresources"
	"github.com/nri-cni/nri-cni/kube/podresources/podresourcestest"
)

const res = "vendor.example/res"

// fakeKubelet starts a fake kubelet in a short temp dir and a client for it.
func fakeKubelet(t testing.TB, fo podresourcestest.Options, co podresources.Options) (*podresourcestest.Server, *podresources.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "prs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	fo.Dir = dir
	srv, err := podresourcestest.Start(fo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	co.Socket = srv.Socket
	c, err := podresources.New(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return srv, c
}

func pod(name string) podresources.Pod {
	return podresources.Pod{Namespace: "team-a", Name: name, UID: "uid-" + name}
}

func TestDeviceIDs(t *testing.T) {
	twoContainers := podresourcestest.Pod("team-a", "web",
		map[string][]string{res: {"dev-3", "dev-1"}, "other.example/x": {"x0"}},
		map[string][]string{res: {"dev-2", "dev-0"}})
	rateLimited := func(n int) func(string) error {
		var mu sync.Mutex
		return func(string) error {
			mu.Lock()
			defer mu.Unlock()
			if n > 0 {
				n--
				return status.Error(codes.ResourceExhausted, "rejected by rate limit")
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name      string
		fake      podresourcestest.Options
		opts      podresources.Options
		pods      []*podresourcesv1.PodResources
		fail      func(string) error
		pod       podresources.Pod
		timeout   time.Duration
		want      []string
		wantErr   error    // errors.Is
		wantMsg   []string // substrings of the error
		wantGets  int
		wantLists int
		maxTime   time.Duration
	}{{
		name: "sorted over containers, whatever order the kubelet lists",
		pods: []*podresourcesv1.PodResources{twoContainers}, pod: pod("web"),
		want: []string{"dev-0", "dev-1", "dev-2", "dev-3"}, wantGets: 1,
	}, {
		name: "a device reported for two NUMA nodes is one device",
		pods: []*podresourcesv1.PodResources{{Namespace: "team-a", Name: "numa", Containers: []*podresourcesv1.ContainerResources{{
			Name: "c0", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: res, DeviceIds: []string{"d1", "d0"},
				Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: 0}, {ID: 1}}}}}}}}},
		pod: pod("numa"), want: []string{"d0", "d1"}, wantGets: 1,
	}, {
		name: "resource not allocated to the pod: names the resource, the pod and what it has",
		pods: []*podresourcesv1.PodResources{podresourcestest.Pod("team-a", "plain", map[string][]string{"other.example/x": {"x0"}})},
		pod:  pod("plain"), wantErr: podresources.ErrNoDevices, wantGets: 1,
		wantMsg: []string{`resource "vendor.example/res"`, "team-a/plain (uid uid-plain)", `["other.example/x"]`},
	}, {
		name: "pod unknown to the kubelet",
		pods: []*podresourcesv1.PodResources{twoContainers}, pod: pod("ghost"),
		wantErr: podresources.ErrPodNotFound, wantMsg: []string{"team-a/ghost", res}, wantGets: 1,
	}, {
		name: "Get unimplemented (kubelet < 1.27): List",
		fake: podresourcestest.Options{GetMode: podresourcestest.GetUnimplemented},
		pods: []*podresourcesv1.PodResources{twoContainers}, pod: pod("web"),
		want: []string{"dev-0", "dev-1", "dev-2", "dev-3"}, wantGets: 1, wantLists: 1,
	}, {
		name: "Get disabled by the feature gate (kubelet 1.27-1.33): List",
		fake: podresourcestest.Options{GetMode: podresourcestest.GetDisabled},
		pods: []*podresourcesv1.PodResources{twoContainers}, pod: pod("web"),
		want: []string{"dev-0", "dev-1", "dev-2", "dev-3"}, wantGets: 1, wantLists: 1,
	}, {
		name: "pod not found through List",
		fake: podresourcestest.Options{GetMode: podresourcestest.GetUnimplemented},
		pods: []*podresourcesv1.PodResources{twoContainers}, pod: pod("ghost"),
		wantErr: podresources.ErrPodNotFound, wantGets: 1, wantLists: 1,
	}, {
		name: "two pods of one name (old one not gone): ambiguous",
		fake: podresourcestest.Options{GetMode: podresourcestest.GetUnimplemented},
		pods: []*podresourcesv1.PodResources{twoContainers, podresourcestest.Pod("team-a", "web", map[string][]string{res: {"z"}})},
		pod:  pod("web"), wantErr: podresources.ErrAmbiguousPod, wantGets: 1, wantLists: 1,
	}, {
		name: "rate limited three times: retried",
		pods: []*podresourcesv1.PodResources{twoContainers}, fail: rateLimited(3), pod: pod("web"),
		want: []string{"dev-0", "dev-1", "dev-2", "dev-3"}, wantGets: 4,
	}, {
		name: "rate limited until the deadline: the caller's deadline ends it, naming the last answer",
		pods: []*podresourcesv1.PodResources{twoContainers}, fail: rateLimited(1 << 30), pod: pod("web"),
		timeout: 300 * time.Millisecond, maxTime: time.Second,
		wantErr: context.DeadlineExceeded, wantMsg: []string{"rejected by rate limit", "team-a/web"}, wantGets: -1,
	}, {
		name: "kubelet answering Unavailable: retried until the deadline",
		fail: func(string) error { return status.Error(codes.Unavailable, "connection refused") },
		pod:  pod("web"), timeout: 200 * time.Millisecond, maxTime: time.Second,
		wantErr: context.DeadlineExceeded, wantMsg: []string{"Unavailable"}, wantGets: -1,
	}, {
		name: "answer over MaxMessageSize: not retried",
		fake: podresourcestest.Options{GetMode: podresourcestest.GetUnimplemented},
		opts: podresources.Options{MaxMessageSize: 64},
		pods: []*podresourcesv1.PodResources{twoContainers, podresourcestest.Pod("team-a", "big", map[string][]string{res: {strings.Repeat("x", 100)}})},
		pod:  pod("web"), wantMsg: []string{"MaxMessageSize"}, wantGets: 1, wantLists: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, c := fakeKubelet(t, tc.fake, tc.opts)
			srv.SetPods(tc.pods...)
			srv.Fail(tc.fail)
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			t0 := time.Now()
			got, err := c.DeviceIDs(ctx, tc.pod, res)
			took := time.Since(t0)
			if tc.wantErr == nil && len(tc.wantMsg) == 0 {
				if err != nil {
					t.Fatalf("DeviceIDs: %v", err)
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("DeviceIDs = %v, want %v", got, tc.want)
				}
			} else {
				if err == nil {
					t.Fatalf("DeviceIDs = %v, want an error", got)
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Errorf("error %q is not %v", err, tc.wantErr)
				}
				for _, m := range tc.wantMsg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q does not name %q", err, m)
					}
				}
				t.Logf("after %s: %v", took.Round(time.Millisecond), err)
			}
			if tc.maxTime > 0 && took > tc.maxTime {
				t.Errorf("took %s, want ≤ %s (the caller's deadline was %s)", took, tc.maxTime, tc.timeout)
			}
			gets, lists := srv.Calls()
			if (tc.wantGets >= 0 && gets != tc.wantGets) || lists != tc.wantLists {
				t.Errorf("the kubelet got %d Gets and %d Lists, want %d and %d", gets, lists, tc.wantGets, tc.wantLists)
			}
		})
	}
}

// The same pod looked up again gives the same order; the kubelet is asked
// once (cache by UID), and again for another pod of the same name (new UID).
func TestStableOrderAndCache(t *testing.T) {
	srv, c := fakeKubelet(t, podresourcestest.Options{}, podresources.Options{})
	srv.SetPods(podresourcestest.Pod("team-a", "web", map[string][]string{res: {"b", "c", "a", "e", "d"}}))
	ctx := context.Background()
	first, err := c.DeviceIDs(ctx, pod("web"), res)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		got, err := c.DeviceIDs(ctx, pod("web"), res)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(first) {
			t.Fatalf("lookup %d: %v, %v; first was %v", i, got, err, first)
		}
	}
	if gets, lists := srv.Calls(); gets != 1 || lists != 0 {
		t.Errorf("cached by UID: the kubelet got %d Gets, %d Lists, want 1, 0", gets, lists)
	}
	replacement := pod("web")
	replacement.UID = "uid-web-2"
	if _, err := c.DeviceIDs(ctx, replacement, res); err != nil {
		t.Fatal(err)
	}
	if gets, _ := srv.Calls(); gets != 2 {
		t.Errorf("a new UID of the same name: %d Gets, want 2", gets)
	}
	// Without the cache, each lookup asks and the order still holds.
	srv2, c2 := fakeKubelet(t, podresourcestest.Options{}, podresources.Options{CacheTTL: -1})
	srv2.SetPods(podresourcestest.Pod("team-a", "web", map[string][]string{res: {"b", "c", "a", "e", "d"}}))
	for i := 0; i < 10; i++ {
		got, err := c2.DeviceIDs(ctx, pod("web"), res)
		if err != nil || fmt.Sprint(got) != "[a b c d e]" {
			t.Fatalf("lookup %d without cache: %v, %v", i, got, err)
		}
	}
	if gets, _ := srv2.Calls(); gets != 10 {
		t.Errorf("without cache: %d Gets, want 10", gets)
	}
}

// The DRA part of the answer: claims with their devices and CDI names.
func TestPodResourcesClaims(t *testing.T) {
	srv, c := fakeKubelet(t, podresourcestest.Options{}, podresources.Options{})
	p := podresourcestest.Pod("team-a", "dra", map[string][]string{res: {"d0"}}, map[string][]string{})
	p.Containers[0].DynamicResources = []*podresourcesv1.DynamicResource{
		podresourcestest.Claim("team-a", "gpu-claim", "gpu.example", "node-1", "gpu-0", "gpu.example/gpu=gpu-0"),
	}
	p.Containers[1].DynamicResources = []*podresourcesv1.DynamicResource{
		podresourcestest.Claim("team-a", "gpu-claim", "gpu.example", "node-1", "gpu-0", "gpu.example/gpu=gpu-0"),
		podresourcestest.Shared(podresourcestest.Claim("team-a", "net-claim", "nri-cni.io", "node-1", "net-a"), "share-1"),
	}
	srv.SetPods(p)
	got, err := c.PodResources(context.Background(), pod("dra"))
	if err != nil {
		t.Fatal(err)
	}
	claims := got.Claims()
	if len(claims) != 2 || claims[0].Name != "gpu-claim" || claims[1].Name != "net-claim" {
		t.Fatalf("Claims() = %+v", claims)
	}
	d := claims[0].Devices[0]
	if d.Driver != "gpu.example" || d.Pool != "node-1" || d.Device != "gpu-0" || fmt.Sprint(d.CDIDevices) != "[gpu.example/gpu=gpu-0]" {
		t.Errorf("gpu claim device %+v", d)
	}
	if claims[1].Devices[0].ShareID != "share-1" {
		t.Errorf("net claim device %+v", claims[1].Devices[0])
	}
	if len(got.Containers) != 2 || got.Containers[0].Name != "c0" || fmt.Sprint(got.DeviceIDs(res)) != "[d0]" {
		t.Errorf("containers %+v", got.Containers)
	}
}

func TestCacheBounded(t *testing.T) {
	srv, c := fakeKubelet(t, podresourcestest.Options{}, podresources.Options{MaxEntries: 8})
	var pods []*podresourcesv1.PodResources
	for i := 0; i < 20; i++ {
		pods = append(pods, podresourcestest.Pod("team-a", fmt.Sprintf("p%d", i), map[string][]string{res: {"d"}}))
	}
	srv.SetPods(pods...)
	for i := 0; i < 20; i++ {
		if _, err := c.DeviceIDs(context.Background(), pod(fmt.Sprintf("p%d", i)), res); err != nil {
			t.Fatal(err)
		}
	}
	if s := c.Stats(); s.CacheEntries != 8 {
		t.Errorf("cache holds %d pods, want 8 (MaxEntries)", s.CacheEntries)
	}
	c.Forget("uid-p19")
	if s := c.Stats(); s.CacheEntries != 7 {
		t.Errorf("after Forget: %d, want 7", s.CacheEntries)
	}
}

func TestPodRequired(t *testing.T) {
	_, c := fakeKubelet(t, podresourcestest.Options{}, podresources.Options{})
	if _, err := c.DeviceIDs(context.Background(), podresources.Pod{Name: "x"}, res); err == nil || !strings.Contains(err.Error(), "namespace and name") {
		t.Errorf("no namespace: %v", err)
	}
}

// With the host's / seen at Root, the socket is a host path resolved inside
// Root: a node whose /var/lib/kubelet is an absolute symlink to another
// disk has the kubelet's socket there, not under this process's own /.
func TestSocketResolvedInsideRoot(t *testing.T) {
	root, err := os.MkdirTemp("", "prr") // short: it holds a socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	real := filepath.Join(root, "data/kubelet/pod-resources")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "var/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/data/kubelet", filepath.Join(root, "var/lib/kubelet")); err != nil {
		t.Fatal(err)
	}
	srv, err := podresourcestest.Start(podresourcestest.Options{Dir: real})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	srv.SetPods(podresourcestest.Pod("team-a", "web", map[string][]string{res: {"d0"}}))
	c, err := podresources.New(podresources.Options{Root: root, Socket: podresources.DefaultSocket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if c.Socket() != podresources.DefaultSocket {
		t.Errorf("Socket() = %s, want the host path %s", c.Socket(), podresources.DefaultSocket)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := c.DeviceIDs(ctx, pod("web"), res)
	if err != nil || fmt.Sprint(got) != "[d0]" {
		t.Fatalf("through <root>/var/lib/kubelet -> /data/kubelet: %v, %v", got, err)
	}
}
