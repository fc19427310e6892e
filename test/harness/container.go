package harness

import (
	"context"
	"encoding/json"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerSpec is the subset of a container config the tests vary. The
// image is the pause image (PauseImage, imported by the harness): it runs
// until it is stopped.
type ContainerSpec struct {
	Name        string
	Annotations map[string]string
	// Command replaces the pause image's entrypoint, e.g. ["/pause",
	// "--require-iface", "net1"] (exits 1 at once without net1).
	Command []string
}

// CreateContainer creates a container in the pod sandbox podID, which RunPod
// created from pod (CRI wants the sandbox's config again, as the kubelet
// sends it), and returns the container's id. It does not start it.
func (c *CRI) CreateContainer(ctx context.Context, podID string, pod PodSpec, ctr ContainerSpec) (string, error) {
	sandbox := c.SandboxConfig(pod) // as RunPod sent it
	resp, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: ctr.Name},
			// UserSpecifiedImage: CRI-O verifies the image it names.
			Image:       &runtimeapi.ImageSpec{Image: PauseImage, UserSpecifiedImage: PauseImage},
			Command:     ctr.Command,
			Annotations: ctr.Annotations,
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				// The pod's network namespace; its own pid namespace, as the
				// kubelet asks by default.
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER},
			}},
		},
		SandboxConfig: sandbox,
	})
	if err != nil {
		return "", fmt.Errorf("CreateContainer %s in %s/%s: %w", ctr.Name, pod.Namespace, pod.Name, err)
	}
	return resp.ContainerId, nil
}

// StartContainer starts a created container.
func (c *CRI) StartContainer(ctx context.Context, id string) error {
	if _, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("StartContainer %.12s: %w", id, err)
	}
	return nil
}

// ContainerStatus is the part of a container's status the tests check.
type ContainerStatus struct {
	State string // CONTAINER_CREATED, CONTAINER_RUNNING, …
	Pid   int    // the container's process (0 unless running)
}

// ContainerStatus fetches a container's verbose status (containerd's "info"
// JSON carries the pid).
func (c *CRI) ContainerStatus(ctx context.Context, id string) (*ContainerStatus, error) {
	resp, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("ContainerStatus %.12s: %w", id, err)
	}
	st := &ContainerStatus{State: resp.GetStatus().GetState().String()}
	if raw, ok := resp.Info["info"]; ok {
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(raw), &info); err != nil {
			return nil, fmt.Errorf("ContainerStatus %.12s: parse verbose info: %w", id, err)
		}
		st.Pid = info.Pid
	}
	return st, nil
}
