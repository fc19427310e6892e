package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRI is a minimal CRI runtime-service client over a unix socket.
type CRI struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
	// Labels are put on every pod RunPod creates (e.g. the test that owns
	// it, so its cleanup can find the pods through CRI).
	Labels map[string]string
	// cgroupParent is the pods' cgroup parent: one per runtime (derived
	// from its socket), removed by the runtime harness's Close. Left empty,
	// containerd would put pods under /k8s.io and CRI-O under /crio, shared
	// by every runtime on the host and never removed.
	cgroupParent string
}

// DialCRI connects to the CRI runtime service at socket (a filesystem path)
// and checks that it answers Version.
func DialCRI(ctx context.Context, socket string) (*CRI, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial CRI %s: %w", socket, err)
	}
	c := &CRI{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn), cgroupParent: PodCgroupParent(socket)}
	if _, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("CRI Version on %s: %w", socket, err)
	}
	return c, nil
}

// Close closes the connection.
func (c *CRI) Close() error { return c.conn.Close() }

// Runtime returns the raw runtime-service client for calls not wrapped here.
func (c *CRI) Runtime() runtimeapi.RuntimeServiceClient { return c.rt }

// PodSpec is the subset of a pod sandbox config the tests vary.
type PodSpec struct {
	Name, Namespace, UID string
	Labels, Annotations  map[string]string
	HostNetwork          bool
	// PidPerContainer sends the kubelet's default pid namespace mode
	// (CONTAINER: each container its own). The zero value sends POD (one
	// shared pid namespace), with which CRI-O always keeps the infra
	// container whatever drop_infra_ctr says; CRI-O tests about the pid
	// mode set it.
	PidPerContainer bool
}

// SandboxConfig is the PodSandboxConfig RunPod sends for spec: the client's
// Labels added to the pod's, its runtime's cgroup parent. CreateContainer
// sends it again, as the kubelet does.
func (c *CRI) SandboxConfig(spec PodSpec) *runtimeapi.PodSandboxConfig {
	if len(c.Labels) > 0 {
		labels := map[string]string{}
		for k, v := range spec.Labels {
			labels[k] = v
		}
		for k, v := range c.Labels {
			labels[k] = v
		}
		spec.Labels = labels
	}
	cfg := sandboxConfig(spec)
	cfg.Linux.CgroupParent = c.cgroupParent
	return cfg
}

func sandboxConfig(spec PodSpec) *runtimeapi.PodSandboxConfig {
	host := spec.Name
	if len(host) > 63 {
		host = host[:63]
	}
	mode := runtimeapi.NamespaceMode_POD
	if spec.HostNetwork {
		// Like kubelet: no hostname for host-network pods. They share the
		// node's UTS namespace and runc refuses to set a hostname there
		// ("unable to set hostname without a private UTS namespace").
		host = ""
		mode = runtimeapi.NamespaceMode_NODE
	}
	pid := runtimeapi.NamespaceMode_POD
	if spec.PidPerContainer {
		pid = runtimeapi.NamespaceMode_CONTAINER
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      spec.Name,
			Namespace: spec.Namespace,
			Uid:       spec.UID,
			Attempt:   0,
		},
		Hostname:     host,
		LogDirectory: "",
		Labels:       spec.Labels,
		Annotations:  spec.Annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: mode, Pid: pid},
			},
		},
	}
}

// RunPod creates and starts a pod sandbox and returns its id. The client's
// Labels are added to the pod's.
func (c *CRI) RunPod(ctx context.Context, spec PodSpec) (string, error) {
	resp, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{
		Config:         c.SandboxConfig(spec),
		RuntimeHandler: "",
	})
	if err != nil {
		return "", fmt.Errorf("RunPodSandbox %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	return resp.PodSandboxId, nil
}

// StopPod stops a pod sandbox (tearing down its network).
func (c *CRI) StopPod(ctx context.Context, id string) error {
	_, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	if err != nil {
		return fmt.Errorf("StopPodSandbox %s: %w", id, err)
	}
	return nil
}

// RemovePod removes a (stopped) pod sandbox.
func (c *CRI) RemovePod(ctx context.Context, id string) error {
	_, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	if err != nil {
		return fmt.Errorf("RemovePodSandbox %s: %w", id, err)
	}
	return nil
}

// ListPods lists the pod sandboxes that carry every label in selector (all
// of them when selector is empty).
func (c *CRI) ListPods(ctx context.Context, selector ...map[string]string) ([]*runtimeapi.PodSandbox, error) {
	req := &runtimeapi.ListPodSandboxRequest{}
	if len(selector) > 0 && len(selector[0]) > 0 {
		req.Filter = &runtimeapi.PodSandboxFilter{LabelSelector: selector[0]}
	}
	resp, err := c.rt.ListPodSandbox(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	return resp.Items, nil
}

// PodStatus is the part of a sandbox's status the tests check.
type PodStatus struct {
	State         string   // e.g. SANDBOX_READY, SANDBOX_NOTREADY
	IP            string   // primary pod IP ("" for none)
	AdditionalIPs []string // further pod IPs
	NetnsPath     string   // network namespace path; "" for host network
	Pid           int      // sandbox (pause) process pid; 0 once stopped
	HostNetwork   bool     // the sandbox uses the node's network namespace
	Info          string   // raw verbose "info" JSON, for debugging
}

// sandboxInfo is the part of containerd's verbose "info" JSON we read. In
// containerd 2.4 that document has the keys pid, processStatus,
// netNamespaceClosed, image, snapshotKey, snapshotter, runtimeType,
// runtimeOptions, config (the CRI PodSandboxConfig), runtimeSpec (the OCI
// spec), cniResult and sandboxMetadata. The pod's netns is the "network"
// entry of runtimeSpec.linux.namespaces (host-network pods have none);
// sandboxMetadata.Metadata.NetNSPath holds the same path. After StopPod pid
// is 0 and the path is still reported, but the netns file is gone.
type sandboxInfo struct {
	Pid         int `json:"pid"`
	RuntimeSpec *struct {
		Linux *struct {
			Namespaces []struct {
				Type string `json:"type"`
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	} `json:"runtimeSpec"`
	SandboxMetadata *struct {
		Metadata *struct {
			NetNSPath string `json:"NetNSPath"`
		} `json:"Metadata"`
	} `json:"sandboxMetadata"`
}

// PodStatus fetches a sandbox's verbose status and extracts state, IPs,
// network namespace path and pid. A non-host-network pod whose netns path
// cannot be found yields an error (and the partial status).
func (c *CRI) PodStatus(ctx context.Context, id string) (*PodStatus, error) {
	resp, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{
		PodSandboxId: id, Verbose: true,
	})
	if err != nil {
		return nil, fmt.Errorf("PodSandboxStatus %s: %w", id, err)
	}
	st := resp.GetStatus()
	if st == nil {
		return nil, fmt.Errorf("PodSandboxStatus %s: empty status", id)
	}
	ps := &PodStatus{State: st.State.String()}
	if n := st.GetNetwork(); n != nil {
		ps.IP = n.Ip
		for _, ip := range n.AdditionalIps {
			ps.AdditionalIPs = append(ps.AdditionalIPs, ip.Ip)
		}
	}
	ps.HostNetwork = st.GetLinux().GetNamespaces().GetOptions().GetNetwork() ==
		runtimeapi.NamespaceMode_NODE

	raw, ok := resp.Info["info"]
	if !ok {
		return nil, fmt.Errorf("PodSandboxStatus %s: no verbose \"info\" key (keys %v)", id, infoKeys(resp.Info))
	}
	ps.Info = raw
	var info sandboxInfo
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return nil, fmt.Errorf("PodSandboxStatus %s: parse verbose info: %w", id, err)
	}
	ps.Pid = info.Pid
	if rs := info.RuntimeSpec; rs != nil && rs.Linux != nil {
		for _, ns := range rs.Linux.Namespaces {
			if ns.Type == "network" {
				ps.NetnsPath = ns.Path
			}
		}
	}
	if ps.NetnsPath == "" && !ps.HostNetwork && info.SandboxMetadata != nil && info.SandboxMetadata.Metadata != nil {
		ps.NetnsPath = info.SandboxMetadata.Metadata.NetNSPath // fallback
	}
	if ps.NetnsPath == "" && !ps.HostNetwork {
		return ps, errors.New("PodSandboxStatus " + id + ": pod network namespace path not found in verbose " +
			"info (runtimeSpec.linux.namespaces[type=network].path, sandboxMetadata.Metadata.NetNSPath)")
	}
	return ps, nil
}

func infoKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
