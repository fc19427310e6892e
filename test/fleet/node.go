package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// Node is a simulated node: its name, token and dirs, the namespaces its
// runtime pinned and the pods it runs. Its Agent comes and goes (restarts);
// the node stays.
type Node struct {
	Name  string
	Dir   string
	Token string
	// Index numbers the node in the fleet (its addresses).
	Index int

	netns *fakeNetns
	exec  *noopExec

	mu      sync.Mutex // guards running, agent
	running map[string]PodRef
	agent   *Agent
}

// PodRef is a pod of the node as its runtime knows it.
type PodRef struct {
	Namespace, Name, UID string
	SandboxID, Netns, IP string
	Annotations          map[string]string
}

func newNode(dir, name string, index int, networks map[string]string) (*Node, error) {
	n := &Node{Name: name, Dir: dir, Index: index, netns: newFakeNetns(), exec: &noopExec{node: byte(index)},
		running: map[string]PodRef{}}
	if err := os.MkdirAll(n.confDir(), 0o755); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	for file, text := range networks {
		if err := os.WriteFile(filepath.Join(n.confDir(), file), []byte(text), 0o644); err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
	}
	return n, nil
}

func (n *Node) confDir() string { return filepath.Join(n.Dir, "net.d") }

// Agent is the node's running nri-cni (nil while stopped).
func (n *Node) Agent() *Agent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.agent
}

func (n *Node) setAgent(a *Agent) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.agent = a
}

// Sandboxes are the pods the node runs, as NRI's Synchronize lists them.
func (n *Node) Sandboxes() []*api.PodSandbox {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*api.PodSandbox, 0, len(n.running))
	for _, p := range n.running {
		out = append(out, Sandbox(p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// Running is how many pods the node runs.
func (n *Node) Running() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.running)
}

// nriTimeout is containerd's plugin_request_timeout: the deadline of the
// NRI requests the handlers get.
const nriTimeout = 2 * time.Second

// RunPod starts p's sandbox: the runtime pins its namespace and sends NRI
// RunPodSandbox to the node's nri-cni.
func (n *Node) RunPod(ctx context.Context, p PodRef) error {
	a := n.Agent()
	if a == nil {
		return fmt.Errorf("node %s: no nri-cni running", n.Name)
	}
	n.netns.Pin(p.Netns)
	n.mu.Lock()
	n.running[p.SandboxID] = p
	n.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, nriTimeout)
	defer cancel()
	if err := a.Plugin.RunPodSandbox(rctx, Sandbox(p)); err != nil {
		return fmt.Errorf("node %s: RunPodSandbox %s/%s: %w", n.Name, p.Namespace, p.Name, err)
	}
	return nil
}

// StopPod tears p's sandbox down as containerd does: StopPodSandbox with
// the namespace still there, then the namespace goes, then
// RemovePodSandbox.
func (n *Node) StopPod(ctx context.Context, p PodRef) error {
	a := n.Agent()
	if a == nil {
		return fmt.Errorf("node %s: no nri-cni running", n.Name)
	}
	rctx, cancel := context.WithTimeout(ctx, nriTimeout)
	defer cancel()
	sb := Sandbox(p)
	if err := a.Plugin.StopPodSandbox(rctx, sb); err != nil {
		return fmt.Errorf("node %s: StopPodSandbox %s/%s: %w", n.Name, p.Namespace, p.Name, err)
	}
	n.netns.Unpin(p.Netns)
	n.mu.Lock()
	delete(n.running, p.SandboxID)
	n.mu.Unlock()
	sb.Linux.Namespaces = nil
	if err := a.Plugin.RemovePodSandbox(rctx, sb); err != nil {
		return fmt.Errorf("node %s: RemovePodSandbox %s/%s: %w", n.Name, p.Namespace, p.Name, err)
	}
	return nil
}

// AnyPod is the name of one pod the node runs ("" if none).
func (n *Node) AnyPod() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.running {
		return p.Name
	}
	return ""
}
