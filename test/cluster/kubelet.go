package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kubeletConfig is the KubeletConfiguration for this host (see shared
// FACTS): cgroupfs with a private cgroupRoot, no iptables util chains, no
// oom_score_adj (no CAP_SYS_RESOURCE), private dirs, image GC off (the
// images are imported offline), low eviction thresholds, serving on the
// node address only.
func (c *Cluster) kubeletConfig() map[string]any {
	cfg := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"containerRuntimeEndpoint":    "unix://" + c.Runtime().CRIAddress(),
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  c.host.cgroupRoot,
		"cgroupsPerQOS":               true,
		"enforceNodeAllocatable":      []string{"pods"},
		"makeIPTablesUtilChains":      false,
		"oomScoreAdj":                 0,
		"podLogsDir":                  c.PodLogsDir,
		"volumePluginDir":             filepath.Join(c.Dir, "volume-plugins"),
		"staticPodPath":               c.StaticPodDir(),
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"imageMinimumGCAge":           "87600h",
		"evictionHard": map[string]string{
			"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
			"imagefs.available": "1%", "imagefs.inodesFree": "1%",
		},
		"failSwapOn":         false,
		"address":            c.NodeIP.String(),
		"port":               c.kubeletPort,
		"readOnlyPort":       0,
		"healthzPort":        0,
		"rotateCertificates": false,
		"serverTLSBootstrap": false,
		"clusterDomain":      "cluster.local",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": c.pki.CA},
		},
		"authorization": map[string]any{"mode": "Webhook"},
	}
	if c.Tools.minor() >= 35 {
		// This host runs cgroup v1, which kubelets 1.35+ refuse unless told
		// (KEP-5573); 1.34's config has no such field.
		cfg["failCgroupV1"] = false
	}
	return cfg
}

// writeKubelet writes the kubelet's config (after edit) and prepares its
// process.
func (c *Cluster) writeKubelet(edit func(map[string]any)) error {
	cfg := c.kubeletConfig()
	if edit != nil {
		edit(cfg)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("kubelet config: %w", err)
	}
	path := filepath.Join(c.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("kubelet config: %w", err)
	}
	for _, d := range []string{c.KubeletRootDir, c.PodLogsDir, c.StaticPodDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("kubelet dir: %w", err)
		}
	}
	args := []string{"--config=" + path, "--kubeconfig=" + filepath.Join(c.Dir, "kubelet.conf"),
		"--root-dir=" + c.KubeletRootDir, "--cert-dir=" + filepath.Join(c.KubeletRootDir, "pki"),
		"--hostname-override=" + c.NodeName, "--node-ip=" + c.NodeIP.String(), "--v=1"}
	if c.Tools.minor() < 37 && c.Containerd != nil {
		// cadvisor dials the default containerd socket otherwise; the flag
		// is gone in 1.37 (its stats come from the CRI).
		args = append(args, "--containerd="+c.Containerd.Address)
	}
	c.kubelet = newProc(c.Dir, "kubelet", c.Tools.bin("kubelet"), procEnv, args...)
	return nil
}

// StopKubelet stops the kubelet (SIGTERM, by pid); pods keep running.
func (c *Cluster) StopKubelet() { c.kubelet.stop(30 * time.Second) }

// StartKubelet starts the kubelet again (after StopKubelet) and waits until
// the node reports Ready with a heartbeat newer than the restart.
func (c *Cluster) StartKubelet(ctx context.Context) error {
	if c.kubelet.running() {
		return fmt.Errorf("kubelet already running (pid %d)", c.kubelet.pid())
	}
	since := time.Now().Add(-time.Second)
	if err := c.kubelet.start(); err != nil {
		return err
	}
	return c.waitNodeReady(ctx, since, 2*time.Minute)
}

// KubeletPid is the kubelet's pid (0 while stopped).
func (c *Cluster) KubeletPid() int { return c.kubelet.pid() }

// KubeletLog is the kubelet's log file.
func (c *Cluster) KubeletLog() string { return c.kubelet.logPath }

// waitNodeReady waits until the node's Ready condition is True with a
// heartbeat after since (or the kubelet exited).
func (c *Cluster) waitNodeReady(ctx context.Context, since time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "node not registered"
	for {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err == nil {
			last = "no Ready condition"
			for _, cond := range node.Status.Conditions {
				if cond.Type != corev1.NodeReady {
					continue
				}
				last = fmt.Sprintf("Ready=%s (%s: %s)", cond.Status, cond.Reason, cond.Message)
				// Heartbeats have second precision.
				if cond.Status == corev1.ConditionTrue && !cond.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)) {
					return nil
				}
			}
		}
		if err := c.kubelet.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready within %s: %s; kubelet log:\n%s", c.NodeName, timeout, last, c.kubelet.logTail(30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitDefaultServiceAccount waits until namespace default has its service
// account (pods are refused before the controller-manager makes it).
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if e := c.controllerManager.exited(); e != nil {
			return e
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("service account default/default not created within %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
