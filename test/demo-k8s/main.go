// Command demo-k8s shows nri-cni deployed on Kubernetes the way a user
// deploys it (root): a single-node cluster (test/cluster: etcd,
// kube-apiserver, controller-manager, scheduler and a kubelet on a private
// containerd 2.4.2 with NRI), nri-cni's image imported into the node's
// containerd, deploy/base applied with `kubectl apply -k` through an overlay
// that changes only paths, ports and the example network's bridge and subnet
// (test/k8sdeploy), two pods on the example network — one with nri-cni's
// annotation, one with the NPWG annotation naming a NetworkAttachmentDefinition,
// as Multus users write it, whose network-status is shown — a ping between
// their net1 addresses, and everything torn down, also on failure.
//
//	make demo-k8s
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

const demoLabel = "nri-cni.io/demo"

func main() {
	// `make demo | head` must not kill the demo before it cleans up: a
	// write to a closed pipe then fails instead of raising SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	start := time.Now()
	if err := run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo-k8s FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("\ndemo-k8s OK (%s)\n", time.Since(start).Round(time.Second))
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }
func info(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

// indent prints a command's output under a step.
func indent(out string) {
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		info("%s", l)
	}
}

func run(ctx context.Context) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("run as root: the demo starts a kubelet, containerd and network namespaces")
	}
	// Teardown runs on a context of its own: a Ctrl-C still cleans up.
	down := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	}
	step("the pinned Kubernetes, etcd, crictl, containerd, runc and CNI plugins (test/tools/install.sh demo-k8s: built once, then cached)")
	ktools, err := cluster.EnsureTools(ctx)
	if err != nil {
		return err
	}
	rtools, err := harness.EnsureContainerdTools()
	if err != nil {
		return err
	}
	info("Kubernetes %s, %s", ktools.Version, rtools.Versions())
	dir, err := os.MkdirTemp("", "ncdk")
	if err != nil {
		return err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = rerr
		}
	}()

	step("starting a single-node Kubernetes (kubelet on a private containerd with NRI) and building nri-cni's image")
	t0 := time.Now()
	var wg sync.WaitGroup
	var tar string
	var imgErr error
	wg.Add(1)
	go func() { defer wg.Done(); tar, imgErr = k8sdeploy.BuildImage(ctx, filepath.Join(dir, "image")) }()
	c, err := cluster.Start(ctx, cluster.Opts{Dir: filepath.Join(dir, "c"), Tools: ktools, RuntimeTools: rtools})
	wg.Wait()
	if err != nil {
		return errors.Join(err, imgErr)
	}
	var overlay *k8sdeploy.Overlay
	defer func() {
		step("stopping the cluster and undoing what the kubelet changed on the host")
		cctx, cancel := down()
		defer cancel()
		cerr := c.Close(cctx)
		if overlay != nil {
			cerr = errors.Join(cerr, overlay.Close())
		}
		if cerr != nil && err == nil {
			err = cerr
		}
	}()
	if imgErr != nil {
		return imgErr
	}
	info("node %s Ready (node IP %s on dummy %s), image %s built: %.1fs", c.NodeName, c.NodeIP, c.Link,
		k8sdeploy.ImageTag, time.Since(t0).Seconds())

	step("deploying nri-cni: image into the node's containerd, kubectl apply -k (deploy/base + isolation overlay)")
	t0 = time.Now()
	d, err := k8sdeploy.Deploy(ctx, c, filepath.Join(dir, "deploy"), tar)
	if err != nil {
		return err
	}
	overlay = d.Overlay
	defer func() {
		step("removing nri-cni (kubectl delete -k)")
		cctx, cancel := down()
		defer cancel()
		if cerr := d.Undeploy(cctx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	info("kubectl apply -k: %s", summarize(d.Output))
	info("DaemonSet pod %s Running, Ready and connected to containerd's NRI: %.1fs", d.Pod, time.Since(t0).Seconds())
	info("network %q: bridge %s, subnet %s", d.Overlay.NetName, d.Overlay.Bridge, d.Overlay.Subnet)

	k := c.Client.CoreV1().Pods("default")
	defer func() {
		cctx, cancel := down()
		defer cancel()
		if derr := deletePods(cctx, c, d.Overlay); derr != nil && err == nil {
			err = derr
		}
	}()
	step("a NetworkAttachmentDefinition, as Multus users have them (kubectl apply -f; empty spec.config = the ConfigMap's network %s)", d.Overlay.NetName)
	nadFile := filepath.Join(dir, "nad.yaml")
	nad := fmt.Sprintf("apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: %s\n  namespace: default\nspec:\n  config: \"\"\n", d.Overlay.NetName)
	if err := os.WriteFile(nadFile, []byte(nad), 0o644); err != nil {
		return err
	}
	indent(nad)
	applied, err := c.Kubectl(ctx, "apply", "-f", nadFile)
	if err != nil {
		return err
	}
	indent(applied)
	defer func() {
		if _, derr := c.Kubectl(context.WithoutCancel(ctx), "delete", "-f", nadFile, "--ignore-not-found"); derr != nil && err == nil {
			err = derr
		}
	}()
	step("creating demo-a annotated %s: %s, and demo-b annotated %s: %s", k8sdeploy.Annotation, d.Overlay.NetName,
		npwgAnnotation, d.Overlay.NetName)
	w, err := k8sdeploy.WatchReady(ctx, c.Client, "default", demoLabel)
	if err != nil {
		return err
	}
	defer w.Stop()
	names := []string{"demo-a", "demo-b"}
	t0 = time.Now()
	for _, p := range []*corev1.Pod{demoPod("demo-a", k8sdeploy.Annotation, d.Overlay.NetName),
		demoPod("demo-b", npwgAnnotation, d.Overlay.NetName)} {
		if _, err := k.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
	}
	for _, name := range names {
		if _, err := w.Wait(ctx, name, 3*time.Minute); err != nil {
			return fmt.Errorf("%w\nnri-cni's log:\n%s", err, d.Log(ctx))
		}
	}
	info("both Ready: %.1fs", time.Since(t0).Seconds())
	out, err := c.Kubectl(ctx, "get", "pods", "-A", "-o", "wide")
	if err != nil {
		return err
	}
	step("kubectl get pods -A -o wide")
	indent(out)

	step("net1 in each pod's network namespace (crictl pods, crictl inspectp → netns)")
	netns := map[string]string{}
	net1 := map[string]net.IP{}
	for _, name := range names {
		p, err := k.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
		if netns[name], err = podNetns(ctx, c, name); err != nil {
			return err
		}
		itf, ok, err := harness.PodIface(netns[name], "net1")
		if err != nil {
			return err
		}
		if !ok || len(itf.Addrs) == 0 {
			return fmt.Errorf("pod %s has no net1 address\nnri-cni's log:\n%s", name, d.Log(ctx))
		}
		net1[name] = itf.Addrs[0].IP
		info("pod %s  eth0 %-15s (pod IP, the runtime's network)  net1 %s (nri-cni)", name, p.Status.PodIP,
			itf.Addrs[0].String())
	}
	info("secondary IPs allocated: %d", len(d.Overlay.Secondary().IPFiles()))

	step("demo-b's network-status, written back by nri-cni (kubectl get pod demo-b -o jsonpath=…)")
	jsonpath := `jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}`
	var status string
	for deadline := time.Now().Add(time.Minute); ; {
		if status, err = c.Kubectl(ctx, "get", "pod", "demo-b", "-o", jsonpath); err != nil {
			return err
		}
		if strings.TrimSpace(status) != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if strings.TrimSpace(status) == "" {
		return fmt.Errorf("demo-b has no network-status\nnri-cni's log:\n%s", d.Log(ctx))
	}
	indent(status)

	step("ping %s (demo-b's net1) from demo-a's network namespace", net1["demo-b"])
	if err := harness.Ping(netns["demo-a"], net1["demo-b"]); err != nil {
		return err
	}
	info("reply received over net1")

	step("deleting both pods (kubectl delete pods)")
	if err := deletePods(ctx, c, d.Overlay); err != nil {
		return err
	}
	info("secondary IPs allocated: %d; nri-cni records left: %d", len(d.Overlay.Secondary().IPFiles()),
		len(harness.PluginConfig{StateDir: d.Overlay.StateDir}.StateFiles()))
	return nil
}

// podNetns finds the pod's ready sandbox and its network namespace with
// crictl, as on a node: crictl pods, then crictl inspectp.
func podNetns(ctx context.Context, c *cluster.Cluster, name string) (string, error) {
	out, err := c.Crictl(ctx, "pods", "-q", "--state", "ready", "--namespace", "default", "--name", "^"+name+"$")
	if err != nil {
		return "", err
	}
	ids := strings.Fields(out)
	if len(ids) != 1 {
		return "", fmt.Errorf("crictl pods: want one ready sandbox of pod %s, have %q", name, ids)
	}
	if out, err = c.Crictl(ctx, "inspectp", ids[0]); err != nil {
		return "", err
	}
	var st struct {
		Info struct {
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct{ Type, Path string } `json:"namespaces"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return "", fmt.Errorf("crictl inspectp %s: %w", ids[0], err)
	}
	for _, ns := range st.Info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			return ns.Path, nil
		}
	}
	return "", fmt.Errorf("crictl inspectp %s: no network namespace path", ids[0])
}

// summarize turns kubectl apply's "kind.group/name created" lines into a
// list of kinds.
func summarize(out string) string {
	var kinds []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		ref, _, _ := strings.Cut(l, " ")
		kind, _, _ := strings.Cut(ref, "/")
		kind, _, _ = strings.Cut(kind, ".")
		kinds = append(kinds, kind)
	}
	return strings.Join(kinds, ", ")
}

// npwgAnnotation is the NPWG (Multus) networks annotation.
const npwgAnnotation = "k8s.v1.cni.cncf.io/networks"

func demoPod(name, annotation, network string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{demoLabel: "yes"},
			Annotations: map[string]string{annotation: network}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// deletePods deletes the demo's pods through the API, waits until they are
// gone and until nri-cni has released their addresses.
func deletePods(ctx context.Context, c *cluster.Cluster, o *k8sdeploy.Overlay) error {
	if _, err := c.Kubectl(ctx, "delete", "pods", "-l", demoLabel, "--ignore-not-found", "--wait=true", "--timeout=2m"); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := o.Secondary().IPFiles()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("secondary IPs not released: %v", left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
