package fleet

// What stands in for the node: a CNI chain that does nothing (every plugin
// answers at once, through libcni's exec seam) and network namespaces that
// exist only as paths the simulated runtime pinned. The attachment engine,
// its records and libcni's cache are real.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/containernetworking/cni/pkg/version"

	"github.com/nri-cni/nri-cni/netns"
)

// noopExec is an invoke.Exec whose every plugin succeeds without doing
// anything: ADD returns the previous result, or for the chain's first
// plugin one interface with an address of 10.251.<node>.0/16 space.
type noopExec struct {
	node byte
	next atomic.Uint32
}

// FindInPath implements invoke.Exec: every plugin exists.
func (e *noopExec) FindInPath(plugin string, _ []string) (string, error) {
	return "/fleet/cni/" + plugin, nil
}

// Decode implements invoke.Exec.
func (e *noopExec) Decode(data []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(data)
}

// ExecPlugin implements invoke.Exec.
func (e *noopExec) ExecPlugin(_ context.Context, _ string, stdin []byte, environ []string) ([]byte, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	switch env["CNI_COMMAND"] {
	case "VERSION":
		return []byte(`{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`), nil
	case "ADD":
	default: // DEL, CHECK, GC, STATUS: nothing to do
		return nil, nil
	}
	var conf struct {
		CNIVersion string          `json:"cniVersion"`
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, fmt.Errorf("no-op plugin: stdin: %w", err)
	}
	if len(conf.PrevResult) > 0 {
		return conf.PrevResult, nil
	}
	n := e.next.Add(1)
	res := map[string]any{
		"cniVersion": conf.CNIVersion,
		"interfaces": []map[string]any{{"name": env["CNI_IFNAME"], "mac": fmt.Sprintf("02:fe:%02x:%02x:%02x:%02x", e.node, byte(n>>16), byte(n>>8), byte(n)),
			"sandbox": env["CNI_NETNS"]}},
		"ips": []map[string]any{{"address": fmt.Sprintf("10.%d.%d.%d/16", 128+e.node%128, byte(n>>8), byte(n)), "interface": 0}},
	}
	return json.Marshal(res)
}

// fakeNetns is attach.NetnsResolver over the paths the simulated runtime
// pinned (Pin) and has not removed yet (Unpin). It belongs to the node, not
// to an agent: a restarted agent finds the namespaces of running pods.
type fakeNetns struct {
	mu   sync.Mutex
	live map[string]netns.ID
	next uint64
}

func newFakeNetns() *fakeNetns { return &fakeNetns{live: map[string]netns.ID{}} }

// Pin makes a namespace exist at path (the runtime pinned it).
func (f *fakeNetns) Pin(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.live[path]; !ok {
		f.next++
		f.live[path] = netns.ID{Dev: 4, Ino: f.next}
	}
}

// Unpin removes it (the runtime tore the sandbox down).
func (f *fakeNetns) Unpin(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, path)
}

// Resolve implements attach.NetnsResolver: the pinned path.
func (f *fakeNetns) Resolve(_ uint32, pinned string) (netns.Netns, error) {
	return f.Check(pinned)
}

// ResolveRunning implements attach.NetnsResolver.
func (f *fakeNetns) ResolveRunning(pid uint32, pinned string) (netns.Netns, error) {
	if pid == 0 {
		return netns.Netns{}, netns.ErrNoNetns
	}
	return f.Check(pinned)
}

// Check implements attach.NetnsResolver.
func (f *fakeNetns) Check(path string) (netns.Netns, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.live[path]
	if !ok {
		return netns.Netns{}, fmt.Errorf("%s: %w", path, os.ErrNotExist)
	}
	return netns.Netns{Path: path, ID: id}, nil
}

// Links implements attach.NetnsResolver: an empty namespace.
func (f *fakeNetns) Links(string) ([]string, error) { return nil, nil }

// Hold: the fleet's pins are not real namespaces; a held one is its pin.
func (f *fakeNetns) Hold(path string, _ netns.ID) (*netns.Held, error) {
	ns, err := f.Check(path)
	if err != nil {
		return nil, err
	}
	return netns.NewHeld(ns.Path, ns.ID, func() {}), nil
}
