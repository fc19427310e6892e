package deviceplugin_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeKubelet is the kubelet's side of the device plugin API: the
// Registration service on <dir>/kubelet.sock which, like the kubelet's
// device manager, checks the request, dials the plugin's endpoint in the same
// directory, asks its options and follows its ListAndWatch stream.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir string
	srv *grpc.Server

	regs    chan *pluginapi.RegisterRequest
	updates chan []*pluginapi.Device

	mu     sync.Mutex
	plugin pluginapi.DevicePluginClient
	conns  []*grpc.ClientConn
}

// startFakeKubelet removes every socket in dir, as a starting kubelet does,
// and serves Registration.
func startFakeKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	k := &fakeKubelet{dir: dir, regs: make(chan *pluginapi.RegisterRequest, 10), updates: make(chan []*pluginapi.Device, 10)}
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.stop)
	return k
}

func (k *fakeKubelet) stop() {
	k.srv.Stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

func (k *fakeKubelet) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.GetVersion() != pluginapi.Version {
		return nil, fmt.Errorf("version %q not supported", r.GetVersion())
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, r.GetEndpoint()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c := pluginapi.NewDevicePluginClient(conn)
	if _, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("plugin options: %w", err)
	}
	stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				close(k.updates)
				return
			}
			k.updates <- resp.GetDevices()
		}
	}()
	k.mu.Lock()
	k.plugin = c
	k.conns = append(k.conns, conn)
	k.mu.Unlock()
	k.regs <- r
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) client() pluginapi.DevicePluginClient {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.plugin
}
