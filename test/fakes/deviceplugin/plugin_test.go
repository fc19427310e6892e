package deviceplugin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nri-cni/nri-cni/test/fakes/deviceplugin"
)

const res = "vendor.example/res"

// shortDir is a temp dir short enough for unix sockets.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fdp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func next[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing within 5s", what)
	}
	var zero T
	return zero
}

func health(devs []*pluginapi.Device) map[string]string {
	m := map[string]string{}
	for _, d := range devs {
		m[d.GetID()] = d.GetHealth()
	}
	return m
}

// What the kubelet does with a device plugin, in order: registration, the
// device list, Allocate for a pod's containers, a health change, the plugin
// going away.
func TestRegisterListAndWatchAllocate(t *testing.T) {
	dir, devinfo := shortDir(t), shortDir(t)
	k := startFakeKubelet(t, dir)
	ctx := context.Background()
	p, err := deviceplugin.Start(ctx, deviceplugin.Config{ResourceName: res, Count: 3, Dir: dir, Links: deviceplugin.LinkNone, DevInfoDir: devinfo})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ids := p.DeviceIDs()

	reg := next(t, k.regs, "registration")
	if reg.GetVersion() != "v1beta1" || reg.GetResourceName() != res || reg.GetEndpoint() != filepath.Base(p.Socket()) || filepath.Dir(p.Socket()) != dir {
		t.Errorf("RegisterRequest %+v (socket %s)", reg, p.Socket())
	}
	devs := next(t, k.updates, "ListAndWatch")
	if fmt.Sprint(health(devs)) != fmt.Sprint(map[string]string{ids[0]: "Healthy", ids[1]: "Healthy", ids[2]: "Healthy"}) {
		t.Errorf("devices %v, want %v healthy", health(devs), ids)
	}

	// Device Information files (spec v1.1.0, 4.1).
	for _, id := range ids {
		path := filepath.Join(devinfo, "dp", "vendor.example-res-"+id+"-device.json")
		if p.DevInfoPath(id) != path {
			t.Errorf("DevInfoPath(%s) = %s, want %s", id, p.DevInfoPath(id), path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var info nadv1.DeviceInfo
		if err := json.Unmarshal(data, &info); err != nil || info.Type != "pci" || info.Version != "1.1.0" || info.Pci == nil || !strings.HasPrefix(info.Pci.PciAddress, "ffff:") {
			t.Errorf("%s: %s (%v)", path, data, err)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o444 {
			t.Errorf("%s: mode %v, want read-only", path, st.Mode())
		}
	}

	// Allocate for two containers, as the kubelet asks at admission.
	resp, err := k.client().Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{ids[2], ids[0]}}, {DevicesIds: []string{ids[1]}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetContainerResponses()) != 2 {
		t.Fatalf("Allocate: %d container responses", len(resp.GetContainerResponses()))
	}
	c0 := resp.GetContainerResponses()[0]
	if got := c0.GetEnvs()["PCIDEVICE_VENDOR_EXAMPLE_RES"]; got != ids[2]+","+ids[0] {
		t.Errorf("PCIDEVICE_VENDOR_EXAMPLE_RES = %q, want %q", got, ids[2]+","+ids[0])
	}
	var info map[string]map[string]map[string]string
	if err := json.Unmarshal([]byte(c0.GetEnvs()["PCIDEVICE_VENDOR_EXAMPLE_RES_INFO"]), &info); err != nil || info[ids[0]]["netdev"]["interface"] != ids[0] {
		t.Errorf("PCIDEVICE_VENDOR_EXAMPLE_RES_INFO = %s (%v)", c0.GetEnvs()["PCIDEVICE_VENDOR_EXAMPLE_RES_INFO"], err)
	}
	if got := c0.GetAnnotations()[deviceplugin.AnnotationPrefix+"vendor.example_res"]; got != ids[2]+","+ids[0] {
		t.Errorf("annotations %v", c0.GetAnnotations())
	}
	if a := p.Allocations(); len(a) != 1 || fmt.Sprint(a[0].Containers) != fmt.Sprint([][]string{{ids[2], ids[0]}, {ids[1]}}) {
		t.Errorf("Allocations() = %v", a)
	}
	_, err = k.client().Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"nope"}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Allocate of an unknown device: %v", err)
	}

	// A device turns unhealthy: the kubelet hears of it.
	if err := p.SetHealthy(ids[1], false); err != nil {
		t.Fatal(err)
	}
	if h := health(next(t, k.updates, "ListAndWatch after SetHealthy")); h[ids[1]] != "Unhealthy" || h[ids[0]] != "Healthy" {
		t.Errorf("after SetHealthy: %v", h)
	}

	// Stop: the stream ends, socket and files are gone.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-k.updates:
		if ok {
			t.Error("ListAndWatch sent after Stop")
		}
	case <-time.After(5 * time.Second):
		t.Error("ListAndWatch did not end at Stop")
	}
	if _, err := os.Stat(p.Socket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Stop: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(devinfo, "dp", "*")); len(left) != 0 {
		t.Errorf("device info files left: %v", left)
	}
}

// The kubelet restarts: it removes every socket in the directory and serves
// a new kubelet.sock; the plugin serves again and registers again.
func TestReregisterAfterKubeletRestart(t *testing.T) {
	dir := shortDir(t)
	k := startFakeKubelet(t, dir)
	p, err := deviceplugin.Start(context.Background(), deviceplugin.Config{ResourceName: res, Count: 1, Dir: dir, Links: deviceplugin.LinkNone, DevInfoDir: shortDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	next(t, k.regs, "first registration")
	k.stop()
	_ = os.Remove(filepath.Join(dir, "kubelet.sock"))

	k2 := startFakeKubelet(t, dir)
	if reg := next(t, k2.regs, "registration with the restarted kubelet"); reg.GetResourceName() != res {
		t.Errorf("registration %+v", reg)
	}
	if devs := next(t, k2.updates, "ListAndWatch from the restarted kubelet"); len(devs) != 1 || devs[0].GetID() != p.DeviceIDs()[0] {
		t.Errorf("devices %v", devs)
	}
	// The kubelet has its answer before the plugin counts it.
	deadline := time.Now().Add(5 * time.Second)
	for n, err := p.Registrations(); n != 2 || err != nil; n, err = p.Registrations() {
		if time.Now().After(deadline) {
			t.Fatalf("Registrations() = %d, %v; want 2, nil", n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStartRefuses(t *testing.T) {
	dir := shortDir(t)
	for _, tc := range []struct {
		name string
		cfg  deviceplugin.Config
		want string
	}{
		{"no domain", deviceplugin.Config{ResourceName: "res", Count: 1}, "extended resource"},
		{"no devices", deviceplugin.Config{ResourceName: res}, "Count 0"},
		{"too many", deviceplugin.Config{ResourceName: res, Count: 300}, "Count 300"},
		{"ID too long for an interface", deviceplugin.Config{ResourceName: res, Count: 10, IDPrefix: "averylongpre", Links: deviceplugin.LinkVeth}, "longer than an interface name"},
		{"no kubelet", deviceplugin.Config{ResourceName: res, Count: 2, Dir: dir, Links: deviceplugin.LinkNone, DevInfoDir: filepath.Join(dir, "devinfo")}, "registering with " + dir + "/kubelet.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p, err := deviceplugin.Start(ctx, tc.cfg)
			if err == nil {
				_ = p.Stop()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
	// The failed start left nothing behind.
	left, _ := filepath.Glob(filepath.Join(dir, "devinfo", "dp", "*"))
	socks, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
	if len(left)+len(socks) != 0 {
		t.Errorf("left behind: %v %v", left, socks)
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ res, env, path string }{
		{"vendor.example/res", "PCIDEVICE_VENDOR_EXAMPLE_RES", "/b/dp/vendor.example-res-dev0-device.json"},
		{"intel.com/intel_sriov_netdevice", "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE", "/b/dp/intel.com-intel_sriov_netdevice-dev0-device.json"},
		{"example.com/a-b", "PCIDEVICE_EXAMPLE_COM_A_B", "/b/dp/example.com-a-b-dev0-device.json"},
	} {
		if got := deviceplugin.EnvName(tc.res); got != tc.env {
			t.Errorf("EnvName(%s) = %s, want %s", tc.res, got, tc.env)
		}
		if got := deviceplugin.DevInfoPath("/b", tc.res, "dev0"); got != tc.path {
			t.Errorf("DevInfoPath(%s) = %s, want %s", tc.res, got, tc.path)
		}
	}
	if got := deviceplugin.DevInfoPath("/b", res, "0000:01/02"); got != "/b/dp/vendor.example-res-0000:01-02-device.json" {
		t.Errorf("a device ID with a slash: %s", got)
	}
}

func TestDeviceInfoOverride(t *testing.T) {
	dir, devinfo := shortDir(t), shortDir(t)
	startFakeKubelet(t, dir)
	p, err := deviceplugin.Start(context.Background(), deviceplugin.Config{
		ResourceName: res, Count: 2, Dir: dir, Links: deviceplugin.LinkNone, DevInfoDir: devinfo, NoReregister: true,
		DeviceInfo: func(i int, id string) *nadv1.DeviceInfo {
			return &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypeVHostUser, Version: nadv1.DeviceInfoVersion,
				VhostUser: &nadv1.VhostDevice{Mode: "server", Path: fmt.Sprintf("/run/vhu-%d-%s.sock", i, id)}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ids := p.DeviceIDs()
	data, err := os.ReadFile(p.DevInfoPath(ids[1]))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"server","path":"/run/vhu-1-%s.sock"}}`, ids[1]); string(data) != want {
		t.Errorf("device info %s, want %s", data, want)
	}
	if !slices.IsSorted(ids) || len(ids) != 2 {
		t.Errorf("ids %v", ids)
	}
}
