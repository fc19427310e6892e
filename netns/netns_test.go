package netns_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/netns"
)

var (
	hostID  = netns.ID{Dev: 4, Ino: 1}
	podID   = netns.ID{Dev: 4, Ino: 100}
	otherID = netns.ID{Dev: 4, Ino: 200}
)

const (
	pinned   = "/run/netns/cni-1234"
	procPath = "/fakeproc/42/ns/net"
)

// fakeIdentify answers from a map; a missing path is os.ErrNotExist.
type fakeIdentify map[string]any // value: netns.ID or error

func (f fakeIdentify) identify(path string) (netns.ID, error) {
	switch v := f[path].(type) {
	case netns.ID:
		return v, nil
	case error:
		return netns.ID{}, v
	default:
		return netns.ID{}, &os.PathError{Op: "statfs", Path: path, Err: os.ErrNotExist}
	}
}

func newResolver(t *testing.T, f fakeIdentify) *netns.Resolver {
	t.Helper()
	r, err := netns.NewResolver(
		netns.WithIdentify(f.identify),
		netns.WithProcRoot("/fakeproc"),
		netns.WithHost(hostID),
	)
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	return r
}

func TestResolve(t *testing.T) {
	t.Parallel()
	errPerm := errors.New("permission denied")
	tests := []struct {
		name     string
		ids      fakeIdentify
		pid      uint32
		pinned   string
		wantErr  error // nil: success
		wantPath string
		wantID   netns.ID
	}{
		{name: "pid 0, no pinned", pid: 0, wantErr: netns.ErrNoNetns},
		{name: "pid 0, pinned ok", ids: fakeIdentify{pinned: podID}, pinned: pinned,
			wantPath: pinned, wantID: podID},
		{name: "pid 0, pinned is host: host-network pod", ids: fakeIdentify{pinned: hostID}, pinned: pinned,
			wantErr: netns.ErrHostNetwork},
		{name: "pid and pinned both host: host-network pod", ids: fakeIdentify{procPath: hostID, pinned: hostID},
			pid: 42, pinned: pinned, wantErr: netns.ErrHostNetwork},
		{name: "pinned is host, pid is not", ids: fakeIdentify{procPath: podID, pinned: hostID},
			pid: 42, pinned: pinned, wantErr: netns.ErrMismatch},
		{name: "pid 0, pinned missing", pinned: pinned, wantErr: os.ErrNotExist},
		{name: "pid 0, pinned not a netns", ids: fakeIdentify{pinned: netns.ErrNotNetns}, pinned: pinned,
			wantErr: netns.ErrNotNetns},
		{name: "pid is host, pinned fine", ids: fakeIdentify{procPath: hostID, pinned: podID},
			pid: 42, pinned: pinned, wantErr: netns.ErrHostNetns},
		{name: "pid is host, no pinned", ids: fakeIdentify{procPath: hostID},
			pid: 42, wantErr: netns.ErrHostNetns},
		{name: "pid and pinned differ", ids: fakeIdentify{procPath: podID, pinned: otherID},
			pid: 42, pinned: pinned, wantErr: netns.ErrMismatch},
		{name: "pid and pinned same", ids: fakeIdentify{procPath: podID, pinned: podID},
			pid: 42, pinned: pinned, wantPath: pinned, wantID: podID},
		{name: "pid ok, no pinned", ids: fakeIdentify{procPath: podID},
			pid: 42, wantPath: procPath, wantID: podID},
		{name: "pid gone, pinned ok", ids: fakeIdentify{pinned: podID},
			pid: 42, pinned: pinned, wantPath: pinned, wantID: podID},
		{name: "pid gone, pinned is host", ids: fakeIdentify{pinned: hostID},
			pid: 42, pinned: pinned, wantErr: netns.ErrHostNetwork},
		{name: "pid gone, no pinned", pid: 42, wantErr: netns.ErrNoNetns},
		{name: "pid gone, pinned missing", pid: 42, pinned: pinned, wantErr: os.ErrNotExist},
		{name: "pid ok, pinned unreadable", ids: fakeIdentify{procPath: podID, pinned: errPerm},
			pid: 42, pinned: pinned, wantErr: errPerm},
		{name: "pid ok, pinned missing", ids: fakeIdentify{procPath: podID},
			pid: 42, pinned: pinned, wantErr: os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newResolver(t, tt.ids)
			got, err := r.Resolve(tt.pid, tt.pinned)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Resolve(%d, %q) = %+v, %v; want error %v", tt.pid, tt.pinned, got, err, tt.wantErr)
				}
				if got != (netns.Netns{}) {
					t.Errorf("Resolve returned %+v with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%d, %q): %v", tt.pid, tt.pinned, err)
			}
			want := netns.Netns{Path: tt.wantPath, ID: tt.wantID}
			if got != want {
				t.Errorf("Resolve(%d, %q) = %+v, want %+v", tt.pid, tt.pinned, got, want)
			}
		})
	}
}

// ResolveRunning never falls back to the pinned path: a listed sandbox
// whose process is gone is not running.
func TestResolveRunning(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ids     fakeIdentify
		pid     uint32
		wantErr error
	}{
		{name: "pid 0", ids: fakeIdentify{pinned: podID}, wantErr: netns.ErrNoNetns},
		{name: "pid gone, pinned alive", ids: fakeIdentify{pinned: podID}, pid: 42, wantErr: netns.ErrNoNetns},
		{name: "pid in another netns", ids: fakeIdentify{procPath: otherID, pinned: podID}, pid: 42, wantErr: netns.ErrMismatch},
		{name: "pid reused by a host process", ids: fakeIdentify{procPath: hostID, pinned: podID}, pid: 42, wantErr: netns.ErrHostNetns},
		{name: "host-network pod", ids: fakeIdentify{procPath: hostID, pinned: hostID}, pid: 42, wantErr: netns.ErrHostNetwork},
		{name: "running", ids: fakeIdentify{procPath: podID, pinned: podID}, pid: 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := newResolver(t, tt.ids).ResolveRunning(tt.pid, pinned)
			if tt.wantErr == nil {
				if err != nil || got != (netns.Netns{Path: pinned, ID: podID}) {
					t.Fatalf("ResolveRunning = %+v, %v; want the pinned netns", got, err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ResolveRunning = %+v, %v; want error %v", got, err, tt.wantErr)
			}
		})
	}
}

func TestResolveHostErrorNamesPid(t *testing.T) {
	t.Parallel()
	r := newResolver(t, fakeIdentify{procPath: hostID})
	_, err := r.Resolve(42, "")
	if want := fmt.Sprintf("pid 42: %s", procPath); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Resolve = %v, want a message containing %q", err, want)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	r := newResolver(t, fakeIdentify{pinned: podID, "/host": hostID})
	if _, err := r.Check(""); !errors.Is(err, netns.ErrNoNetns) {
		t.Errorf("Check(\"\") = %v, want ErrNoNetns", err)
	}
	if _, err := r.Check("/host"); !errors.Is(err, netns.ErrHostNetns) {
		t.Errorf("Check(host) = %v, want ErrHostNetns", err)
	}
	if _, err := r.Check("/missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Check(missing) = %v, want ErrNotExist", err)
	}
	got, err := r.Check(pinned)
	if err != nil || got != (netns.Netns{Path: pinned, ID: podID}) {
		t.Errorf("Check(pinned) = %+v, %v", got, err)
	}
}

func TestNewResolverHostDiscovery(t *testing.T) {
	t.Parallel()
	t.Run("self and init both count as host", func(t *testing.T) {
		t.Parallel()
		r, err := netns.NewResolver(netns.WithProcRoot("/fakeproc"), netns.WithIdentify(fakeIdentify{
			"/fakeproc/self/ns/net": hostID, "/fakeproc/1/ns/net": otherID,
			"/a": hostID, "/b": otherID, "/c": podID,
		}.identify))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/a", "/b"} {
			if _, err := r.Check(p); !errors.Is(err, netns.ErrHostNetns) {
				t.Errorf("Check(%s) = %v, want ErrHostNetns", p, err)
			}
		}
		if _, err := r.Check("/c"); err != nil {
			t.Errorf("Check(/c) = %v", err)
		}
	})
	t.Run("init unreadable is fine", func(t *testing.T) {
		t.Parallel()
		r, err := netns.NewResolver(netns.WithProcRoot("/fakeproc"), netns.WithIdentify(fakeIdentify{
			"/fakeproc/self/ns/net": hostID, "/a": hostID,
		}.identify))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Check("/a"); !errors.Is(err, netns.ErrHostNetns) {
			t.Errorf("Check(/a) = %v, want ErrHostNetns", err)
		}
	})
	t.Run("self unreadable", func(t *testing.T) {
		t.Parallel()
		_, err := netns.NewResolver(netns.WithProcRoot("/fakeproc"), netns.WithIdentify(fakeIdentify{}.identify))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("NewResolver = %v, want ErrNotExist", err)
		}
	})
}

// The real Identify; none of these needs root.

func TestIdentifyReal(t *testing.T) {
	t.Parallel()
	id, err := netns.Identify("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("Identify(/proc/self/ns/net): %v", err)
	}
	if id.Ino == 0 {
		t.Errorf("Identify(/proc/self/ns/net) = %+v, want a non-zero inode", id)
	}
	again, err := netns.Identify("/proc/self/ns/net")
	if err != nil || again != id {
		t.Errorf("second Identify = %+v, %v; want %+v", again, err, id)
	}

	for _, p := range []string{"/proc/self/ns/mnt", "/proc/self/ns/pid", "/proc/self/status"} {
		if _, err := netns.Identify(p); !errors.Is(err, netns.ErrNotNetns) {
			t.Errorf("Identify(%s) = %v, want ErrNotNetns", p, err)
		}
	}

	regular := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(regular, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.Identify(regular); !errors.Is(err, netns.ErrNotNetns) {
		t.Errorf("Identify(regular file) = %v, want ErrNotNetns", err)
	}

	missing := filepath.Join(t.TempDir(), "missing")
	_, err = netns.Identify(missing)
	var pe *os.PathError
	if !errors.Is(err, os.ErrNotExist) || !errors.As(err, &pe) || pe.Path != missing {
		t.Errorf("Identify(missing) = %#v, want *os.PathError for %s wrapping ErrNotExist", err, missing)
	}
}

func TestNewResolverRealRefusesHost(t *testing.T) {
	t.Parallel()
	r, err := netns.NewResolver()
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	if _, err := r.Check("/proc/self/ns/net"); !errors.Is(err, netns.ErrHostNetns) {
		t.Errorf("Check(/proc/self/ns/net) = %v, want ErrHostNetns", err)
	}
	if _, err := r.Resolve(uint32(os.Getpid()), ""); !errors.Is(err, netns.ErrHostNetns) {
		t.Errorf("Resolve(own pid) = %v, want ErrHostNetns", err)
	}
	if _, err := r.Check("/proc/self/ns/mnt"); !errors.Is(err, netns.ErrNotNetns) {
		t.Errorf("Check(/proc/self/ns/mnt) = %v, want ErrNotNetns", err)
	}
}
