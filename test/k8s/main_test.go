// Package k8s is the Kubernetes tier: a real single-node Kubernetes
// (test/cluster: etcd, kube-apiserver, controller-manager, scheduler and a
// kubelet on the harness's containerd 2.4.2 with NRI), nri-cni's image built
// the way `make image` builds it, imported into the node's containerd, and
// deploy/base applied with `kubectl apply -k` through an overlay that changes
// only what isolation needs (host paths, the NRI socket's directory, the
// metrics port, the example network's bridge and subnet, imagePullPolicy).
// Every scenario works through the Kubernetes API, as a user would, and
// checks the node: the pod's netns, nri-cni's records, host-local's address
// files, libcni's cache and the bridge's ports. Root only; in `make test` and
// `make e2e-k8s`.
package k8s

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// imageTag is the reference deploy/base's DaemonSet names (`make image`).
const imageTag = "localhost/nri-cni:dev"

// world is shared by the package's tests: the cluster and where the
// DaemonSet's host paths point. Tests leave it as they found it.
var world *env

type env struct {
	dir     string
	c       *cluster.Cluster
	overlay overlay
	ctr     string // the node containerd's ctr
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("k8s: tests skip: they need root (a kubelet, containerd, network namespaces)")
		os.Exit(m.Run())
	}
	os.Exit(setupAndRun(m))
}

// needWorld skips t unless root and fails it if the setup did not finish.
func needWorld(t *testing.T) *env {
	t.Helper()
	testenv.RequireRoot(t)
	if world == nil {
		t.Fatal("k8s: no cluster (setup failed)")
	}
	return world
}

func setupAndRun(m *testing.M) int {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Printf("k8s: "+format+"\n", args...) }
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "k8s setup:", err); return 1 }

	dir, err := os.MkdirTemp("", "k8st")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	e := &env{dir: dir}
	defer func() {
		if err := e.close(); err != nil {
			fmt.Fprintln(os.Stderr, "k8s teardown:", err)
		}
	}()
	if err := e.setup(ctx, logf); err != nil {
		return fail(err)
	}
	logf("setup done in %s", time.Since(start).Round(time.Millisecond))
	world = e
	code := m.Run()
	world = nil
	if err := e.report(ctx, logf); err != nil {
		fmt.Fprintln(os.Stderr, "k8s teardown:", err)
		code = 1
	}
	if err := e.undeploy(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "k8s teardown:", err)
		code = 1
	}
	return code
}

// setup builds the image while the cluster starts, imports it, applies the
// overlay and waits for nri-cni to be Ready and connected to containerd.
func (e *env) setup(ctx context.Context, logf func(string, ...any)) error {
	tools, err := cluster.EnsureTools(ctx)
	if err != nil {
		return err
	}
	rtTools, err := harness.EnsureTools()
	if err != nil {
		return err
	}
	e.ctr = filepath.Join(rtTools.ContainerdDir, "ctr")
	var wg sync.WaitGroup
	var imgErr error
	tar := filepath.Join(e.dir, "image", "nri-cni-image.tar")
	wg.Add(1)
	go func() { defer wg.Done(); imgErr = buildImage(ctx, tar, filepath.Join(e.dir, "image", "nri-cni")) }()
	t0 := time.Now()
	e.c, err = cluster.Start(ctx, cluster.Opts{Dir: filepath.Join(e.dir, "c"), Tools: tools, RuntimeTools: rtTools,
		Audit: true, PluginRequestTimeout: 2 * time.Second, Logf: logf})
	wg.Wait()
	if err != nil {
		return errors.Join(err, imgErr)
	}
	if imgErr != nil {
		return imgErr
	}
	logf("cluster up and image built in %s", time.Since(t0).Round(time.Millisecond))
	if err := harness.ImportImage(ctx, e.ctr, e.c.Containerd.Address, tar); err != nil {
		return err
	}
	if e.overlay, err = writeOverlay(ctx, e.dir, e.c.Containerd, e.c.Kubectl); err != nil {
		return err
	}
	t1 := time.Now()
	synced := e.c.Containerd.CountLog(harness.PluginSynced("10-nri-cni"))
	if out, err := e.c.Kubectl(ctx, "apply", "-k", e.overlay.dir); err != nil {
		return err
	} else {
		logf("kubectl apply -k overlay:\n%s", strings.TrimSpace(out))
	}
	if _, err := e.waitNRICNI(ctx, synced+1); err != nil {
		return err
	}
	logf("DaemonSet pod Running, Ready and connected to containerd in %s", time.Since(t1).Round(time.Millisecond))
	return nil
}

// buildImage runs the image builder as `make image` does, into a temp dir.
func buildImage(ctx context.Context, out, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "run", "./test/tools/image", "-out", out, "-tag", imageTag,
		"-version", harness.RandomName("k8s-"), "-bin", bin)
	cmd.Dir = harness.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go run ./test/tools/image: %w\n%s", err, b)
	}
	return nil
}

// undeploy deletes the overlay's objects through the API and waits for
// nri-cni's pod to be gone.
func (e *env) undeploy(ctx context.Context) error {
	if e.c == nil || e.overlay.dir == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if _, err := e.c.Kubectl(ctx, "delete", "-k", e.overlay.dir, "--wait=true", "--timeout=2m"); err != nil {
		return err
	}
	return e.waitNoNRICNIPod(ctx)
}

// close stops the cluster and undoes what the overlay set up on the host:
// the shared netns mount, nri-cni's bridge.
func (e *env) close() error {
	var errs []error
	if e.c != nil {
		if err := e.c.Close(context.Background()); err != nil {
			errs = append(errs, err)
		}
	}
	if e.overlay.unshare != nil {
		// cluster.Close unmounts everything under its dir, this too.
		if err := e.overlay.unshare(); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	if e.overlay.bridge != "" {
		_ = exec.Command("ip", "link", "del", e.overlay.bridge).Run()
	}
	return errors.Join(errs...)
}

// report logs the API requests nri-cni's service account made during the
// run (issue 13 wants zero on the attach path) and the components' RSS.
func (e *env) report(_ context.Context, logf func(string, ...any)) error {
	events, err := e.c.AuditEvents(func(ev cluster.AuditEvent) bool {
		u := ev.User.Username
		return u == "system:serviceaccount:kube-system:default" || strings.Contains(u, "nri-cni") ||
			strings.HasPrefix(ev.UserAgent, "nri-cni")
	})
	if err != nil {
		return err
	}
	byKind := map[string]int{}
	for _, ev := range events {
		k := ev.Verb
		if ev.ObjectRef != nil {
			k += " " + ev.ObjectRef.Resource
		}
		byKind[k]++
	}
	logf("API requests by nri-cni (its service account or user agent, or kube-system:default): %d %v", len(events), byKind)
	for name, kib := range e.c.RSS() {
		logf("RSS %-24s %6d KiB", name, kib)
	}
	if pid := nriCNIPid(e.overlay.metricsAddr); pid > 0 {
		logf("RSS %-24s %6d KiB", "nri-cni", rssKiB(pid))
	}
	return nil
}
