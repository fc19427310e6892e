// Package k8s is the Kubernetes tier: a real single-node Kubernetes
// (test/cluster: etcd, kube-apiserver, controller-manager, scheduler and a
// kubelet on the harness's containerd 2.4.2 with NRI), nri-cni's image built
// the way `make image` builds it, imported into the node's containerd, and
// deploy/base applied with `kubectl apply -k` through an overlay that changes
// only what isolation needs (host paths, the NRI socket's directory, the
// metrics port, the example network's bridge and subnet, imagePullPolicy)
// and turns on what the tier tests on top (hot-plug, MultiNetworkPolicy).
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
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// world is shared by the package's tests: the cluster and nri-cni deployed
// on it (where the DaemonSet's host paths point). Tests leave it as they
// found it.
var world *env

type env struct {
	dir string
	c   *cluster.Cluster
	d   *k8sdeploy.Deployed // nil until deployed
	o   *k8sdeploy.Overlay  // d.Overlay
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

// teardownBudget bounds what runs after the tests (the report, kubectl
// delete of the overlay): its own budget, not what is left of the setup's.
const teardownBudget = 5 * time.Minute

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
	// The setup's budget is spent or nearly so (the tests ran for as long
	// as a loaded machine makes them): the teardown gets its own.
	tctx, tcancel := context.WithTimeout(context.Background(), teardownBudget)
	defer tcancel()
	if err := e.report(tctx, logf); err != nil {
		fmt.Fprintln(os.Stderr, "k8s teardown:", err)
		code = 1
	}
	if err := e.undeploy(tctx); err != nil {
		fmt.Fprintln(os.Stderr, "k8s teardown:", err)
		code = 1
	}
	return code
}

// setup builds the image while the cluster starts, then deploys nri-cni
// (k8sdeploy.Deploy: image imported, overlay applied, the DaemonSet's pod
// Ready and connected to containerd).
func (e *env) setup(ctx context.Context, logf func(string, ...any)) error {
	tools, err := cluster.EnsureTools(ctx)
	if err != nil {
		return err
	}
	rtTools, err := harness.EnsureTools()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var tar string
	var imgErr error
	wg.Add(1)
	go func() { defer wg.Done(); tar, imgErr = k8sdeploy.BuildImage(ctx, filepath.Join(e.dir, "image")) }()
	t0 := time.Now()
	e.c, err = cluster.Start(ctx, cluster.Opts{Dir: filepath.Join(e.dir, "c"), Tools: tools, RuntimeTools: rtTools,
		Audit: true, PluginRequestTimeout: 2 * time.Second, Logf: logf,
		// The kubelet retries what failed (a static pod's mirror while the API
		// server was down) on its periodic sync: every 10 s here, not 1 min.
		EditKubeletConfig: func(k map[string]any) { k["syncFrequency"] = "10s" }})
	wg.Wait()
	if err != nil {
		return errors.Join(err, imgErr)
	}
	if imgErr != nil {
		return imgErr
	}
	logf("cluster up and image built in %s", time.Since(t0).Round(time.Millisecond))
	t1 := time.Now()
	// MultiNetworkPolicy enforced tier-wide: every test's pods run under
	// it (selected by no policy but TestMultiNetworkPolicy's).
	if e.d, err = k8sdeploy.Deploy(ctx, e.c, filepath.Join(e.dir, "deploy"), tar, k8sdeploy.WithMultiNetworkPolicy()); err != nil {
		return err
	}
	e.o = e.d.Overlay
	logf("kubectl apply -k overlay:\n%s", strings.TrimSpace(e.d.Output))
	logf("DaemonSet pod Running, Ready and connected to containerd in %s", time.Since(t1).Round(time.Millisecond))
	return nil
}

// undeploy deletes the overlay's objects through the API and waits for
// nri-cni's pod to be gone.
func (e *env) undeploy(ctx context.Context) error {
	if e.d == nil {
		return nil
	}
	return e.d.Undeploy(ctx)
}

// close stops the cluster, then undoes what the overlay set up on the host
// (the shared netns mount, nri-cni's bridge).
func (e *env) close() error {
	var errs []error
	if e.c != nil {
		if err := e.c.Close(context.Background()); err != nil {
			errs = append(errs, err)
		}
	}
	if e.o != nil {
		errs = append(errs, e.o.Close())
	}
	return errors.Join(errs...)
}

// report logs the API requests nri-cni's service account made during the
// run (issue 13 wants zero on the attach path) and the components' RSS.
func (e *env) report(ctx context.Context, logf func(string, ...any)) error {
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
	if pid, err := e.d.Pid(ctx); err != nil {
		logf("RSS nri-cni unknown: %v", err)
	} else {
		logf("RSS %-24s %6d KiB", "nri-cni", cluster.RSSKiB(pid))
	}
	return nil
}
