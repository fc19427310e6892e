package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
)

const dsSelector = "app.kubernetes.io/name=nri-cni"

// nriCNIPods lists the DaemonSet's pods.
func (e *env) nriCNIPods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := e.c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: dsSelector})
	if err != nil {
		return nil, fmt.Errorf("listing nri-cni's pods: %w", err)
	}
	return l.Items, nil
}

// waitNRICNI waits until the DaemonSet has exactly one pod, Running and
// Ready, and containerd has logged nri-cni's registration at least synced
// times; it returns the pod's name.
func (e *env) waitNRICNI(ctx context.Context, synced int) (string, error) {
	deadline := time.Now().Add(waitLong)
	pattern := harness.PluginSynced("10-nri-cni")
	for {
		pods, err := e.nriCNIPods(ctx)
		last := fmt.Sprint(err)
		if err == nil {
			last = describePods(pods)
			if len(pods) == 1 && podReady(&pods[0]) && e.c.Containerd.CountLog(pattern) >= synced {
				return pods[0].Name, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("nri-cni not Ready and connected within %s (containerd logged %q %d times, want %d): %s\ncontainerd log tail:\n%s",
				waitLong, pattern, e.c.Containerd.CountLog(pattern), synced, last, e.c.Containerd.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitNoNRICNIPod waits until the DaemonSet has no pod.
func (e *env) waitNoNRICNIPod(ctx context.Context) error {
	deadline := time.Now().Add(waitLong)
	for {
		pods, err := e.nriCNIPods(ctx)
		if err == nil && len(pods) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nri-cni's pod still there after %s: %s %v", waitLong, describePods(pods), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func describePods(pods []corev1.Pod) string {
	var s []string
	for _, p := range pods {
		s = append(s, fmt.Sprintf("%s %s ready=%t deleting=%t", p.Name, p.Status.Phase, podReady(&p), p.DeletionTimestamp != nil))
	}
	return fmt.Sprintf("%d pods %v", len(pods), s)
}

// nriCNIPid finds the DaemonSet's nri-cni process (hostPID: it is visible
// here) by the metrics address only this run's overlay gives it.
func nriCNIPid(metricsAddr string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if strings.HasSuffix(args[0], "nri-cni") && len(args) > 1 && args[1] == "run" && strings.Contains(string(cmdline), metricsAddr) {
			return pid
		}
	}
	return 0
}

// rssKiB is VmRSS of pid in KiB (0 when unknown).
func rssKiB(pid int) int {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
