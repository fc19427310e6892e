package k8sdeploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

const (
	// ImageTag is the reference deploy/base's DaemonSet names (`make image`).
	ImageTag = build.DefaultTag
	// Selector selects the DaemonSet's pods (kube-system).
	Selector = "app.kubernetes.io/name=nri-cni"
	// Annotation is the pod annotation naming nri-cni's networks.
	Annotation = "nri-cni.io/networks"
	// PluginName is how nri-cni registers with the runtime's NRI (idx-name).
	PluginName = "10-nri-cni"
)

// BuildImage builds nri-cni's image as `make image` does into dir and
// returns the archive's path.
func BuildImage(ctx context.Context, dir string) (string, error) {
	res, err := build.Build(ctx, build.Options{RepoRoot: harness.RepoRoot(), Out: filepath.Join(dir, "nri-cni-image.tar"),
		Tag: ImageTag, Version: harness.RandomName("k8s-"), BinOut: filepath.Join(dir, "nri-cni")})
	if err != nil {
		return "", fmt.Errorf("building nri-cni's image: %w", err)
	}
	return res.Out, nil
}

// Deployed is nri-cni running on a cluster from an overlay of deploy/base.
type Deployed struct {
	Cluster *cluster.Cluster
	Overlay *Overlay
	Pod     string // the DaemonSet's pod (kube-system), as WaitReady last found it
	Output  string // what `kubectl apply -k` printed
}

// Deploy loads the image archive into the node runtime's image store
// (containerd's k8s.io namespace or CRI-O's storage), writes an overlay into
// dir (WriteOverlay), applies it with `kubectl apply -k` and waits until the
// DaemonSet's pod is Running and Ready and the runtime has logged nri-cni's
// registration. On error what it did is undone.
func Deploy(ctx context.Context, c *cluster.Cluster, dir, imageTar string, opts ...Option) (d *Deployed, err error) {
	if err := c.LoadImage(ctx, imageTar); err != nil {
		return nil, err
	}
	host, port := c.APIServerHostPort()
	o, err := WriteOverlay(ctx, dir, c.Runtime(), c.Kubectl, host, port, c.KubeletRootDir, opts...)
	if err != nil {
		return nil, err
	}
	d = &Deployed{Cluster: c, Overlay: o}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Undeploy(context.WithoutCancel(ctx)), o.Close())
			d = nil
		}
	}()
	synced := d.Registrations()
	if d.Output, err = c.Kubectl(ctx, "apply", "-k", o.Dir); err != nil {
		return d, err
	}
	_, err = d.WaitReady(ctx, synced+1, 3*time.Minute)
	return d, err
}

// Registrations is how many times the node's runtime has logged nri-cni's
// registration (its NRI plugin synchronized) so far; containerd and CRI-O
// log the same line (both vendor NRI's adaptation).
func (d *Deployed) Registrations() int {
	return d.Cluster.Runtime().CountLog(d.Cluster.Runtime().PluginSynced(PluginName))
}

// WaitReady waits until the DaemonSet has exactly one pod, Running and
// Ready, and the runtime has logged nri-cni's registration at least synced
// times (Registrations); it records the pod's name in d.Pod and returns it.
func (d *Deployed) WaitReady(ctx context.Context, synced int, timeout time.Duration) (string, error) {
	rt := d.Cluster.Runtime()
	var name string
	err := poll(ctx, timeout, func() (bool, string) {
		pods, err := d.Pods(ctx)
		if err != nil {
			return false, err.Error()
		}
		n := d.Registrations()
		if len(pods) == 1 && PodReady(&pods[0]) && n >= synced {
			name = pods[0].Name
			return true, ""
		}
		return false, fmt.Sprintf("%s; %s logged %q %d times, want %d", describe(pods), rt.Name(),
			rt.PluginSynced(PluginName), n, synced)
	})
	if err != nil {
		return "", fmt.Errorf("nri-cni Ready and connected to %s: %w\n%s log tail:\n%s",
			rt.Name(), err, rt.Name(), rt.LogTail(20))
	}
	d.Pod = name
	return name, nil
}

// Undeploy deletes the overlay's objects through the API and waits until
// nri-cni's pod is gone. Deleting what is not there is not an error.
func (d *Deployed) Undeploy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if _, err := d.Cluster.Kubectl(ctx, "delete", "-k", d.Overlay.Dir, "--ignore-not-found", "--wait=true", "--timeout=2m"); err != nil {
		return err
	}
	return d.WaitGone(ctx, 2*time.Minute)
}

// WaitGone waits until the DaemonSet has no pod (deleted, or moved off the
// node).
func (d *Deployed) WaitGone(ctx context.Context, timeout time.Duration) error {
	err := poll(ctx, timeout, func() (bool, string) {
		pods, err := d.Pods(ctx)
		return err == nil && len(pods) == 0, fmt.Sprintf("%s %v", describe(pods), err)
	})
	if err != nil {
		return fmt.Errorf("nri-cni's pod gone: %w", err)
	}
	return nil
}

// Pid is the pid of the running nri-cni container of the DaemonSet's pod,
// from the runtime (crictl inspect).
func (d *Deployed) Pid(ctx context.Context) (int, error) {
	out, err := d.Cluster.Crictl(ctx, "ps", "-q", "--state", "running", "--name", "^nri-cni$",
		"--label", "io.kubernetes.pod.name="+d.Pod, "--label", "io.kubernetes.pod.namespace=kube-system")
	if err != nil {
		return 0, err
	}
	ids := strings.Fields(out)
	if len(ids) != 1 {
		return 0, fmt.Errorf("crictl ps: want one running nri-cni container in pod %s, have %q", d.Pod, ids)
	}
	out, err = d.Cluster.Crictl(ctx, "inspect", ids[0])
	if err != nil {
		return 0, err
	}
	var st struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Info.Pid <= 0 {
		return 0, fmt.Errorf("crictl inspect %s: no pid (%v)", ids[0], err)
	}
	return st.Info.Pid, nil
}

// ReadLog is the whole log of the nri-cni container of d.Pod (kubectl logs).
func (d *Deployed) ReadLog(ctx context.Context) (string, error) {
	return d.Cluster.Kubectl(ctx, "-n", "kube-system", "logs", d.Pod, "-c", "nri-cni", "--tail=-1")
}

// Log is ReadLog for error messages: "" when it cannot be read.
func (d *Deployed) Log(ctx context.Context) string {
	out, _ := d.ReadLog(ctx)
	return out
}

// SandboxNetns is the network namespace path of the pod's ready sandbox.
func SandboxNetns(ctx context.Context, cri *harness.CRI, uid string) (string, error) {
	list, err := cri.ListPods(ctx, map[string]string{"io.kubernetes.pod.uid": uid})
	if err != nil {
		return "", err
	}
	for _, sb := range list {
		if sb.State.String() != "SANDBOX_READY" {
			continue
		}
		st, err := cri.PodStatus(ctx, sb.Id)
		if err != nil {
			return "", err
		}
		return st.NetnsPath, nil
	}
	return "", fmt.Errorf("pod uid %s: no ready sandbox among %d", uid, len(list))
}

// PodReady: Running, not being deleted, condition Ready true.
func PodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Pods lists the DaemonSet's pods.
func (d *Deployed) Pods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := d.Cluster.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: Selector})
	if err != nil {
		return nil, fmt.Errorf("listing nri-cni's pods: %w", err)
	}
	return l.Items, nil
}

func describe(pods []corev1.Pod) string {
	s := make([]string, 0, len(pods))
	for _, p := range pods {
		s = append(s, p.Name+" "+string(p.Status.Phase)+" ready="+strconv.FormatBool(PodReady(&p))+
			" deleting="+strconv.FormatBool(p.DeletionTimestamp != nil))
	}
	return fmt.Sprintf("%d nri-cni pods %v", len(pods), s)
}

// poll runs cond every 200 ms until it holds; after timeout the error
// carries cond's last message.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Away moves the DaemonSet off the node (a nodeSelector no node has, as a
// rolling upgrade, a crash or an eviction leaves the node without nri-cni)
// and waits until its pod is gone. back puts it back and waits until the
// new pod is Ready and registered; calling it again does nothing.
func (d *Deployed) Away(ctx context.Context) (back func(context.Context) error, err error) {
	const away = `{"spec":{"template":{"spec":{"nodeSelector":{"nri-cni.io/test-away":"true"}}}}}`
	const home = `{"spec":{"template":{"spec":{"nodeSelector":null}}}}`
	done := false
	back = func(ctx context.Context) error {
		if done {
			return nil
		}
		done = true
		synced := d.Registrations()
		if _, err := d.Cluster.Kubectl(ctx, "-n", "kube-system", "patch", "ds/nri-cni", "--type=merge", "-p", home); err != nil {
			return err
		}
		_, err := d.WaitReady(ctx, synced+1, 3*time.Minute)
		return err
	}
	if _, err := d.Cluster.Kubectl(ctx, "-n", "kube-system", "patch", "ds/nri-cni", "--type=merge", "-p", away); err != nil {
		return back, err
	}
	return back, d.WaitGone(ctx, 3*time.Minute)
}
