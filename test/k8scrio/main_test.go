// Package k8scrio is the Kubernetes tier on CRI-O: the single-node cluster
// of test/cluster with its kubelet (v1.37.2) on the harness's CRI-O 1.36.3
// (cgroupfs, the infra container dropped as CRI-O does by default under a
// kubelet), nri-cni's image loaded into CRI-O's storage and deploy/base
// applied with `kubectl apply -k` through test/k8sdeploy's overlay (the
// DaemonSet's NRI socket dir and netns dir pointed at CRI-O's). It runs the
// scenarios whose outcome depends on the runtime, where CRI-O differs from
// containerd: it removes the pod's netns before NRI StopPodSandbox, hands
// NRI Pid 0 for a pod without an infra container, keeps pods across its
// restart, and pins a bind of the host's netns for hostNetwork pods. An NRI
// observer on CRI-O's socket records what CRI-O sends, so each test asserts
// the runtime behaviour it is about as well as nri-cni's outcome. Everything
// goes through the Kubernetes API, as in test/k8s. Root only; in `make test`.
package k8scrio

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

// world is shared by the package's tests: the cluster, nri-cni deployed on
// it and the NRI observer. Tests leave it as they found it.
var world *env

type env struct {
	dir string
	c   *cluster.Cluster
	d   *k8sdeploy.Deployed // nil until deployed
	o   *k8sdeploy.Overlay  // d.Overlay

	mu  sync.Mutex
	obs *harness.Observer // reconnected after a CRI-O restart (observer())
}

// observerName registers the observer with CRI-O's NRI (idx-name); index 90
// puts it after nri-cni (10) in every event.
const observerName, observerIdx = "k8scrio-observer", "90"

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("k8scrio: tests skip: they need root (a kubelet, CRI-O, network namespaces)")
		os.Exit(m.Run())
	}
	os.Exit(setupAndRun(m))
}

// needWorld skips t unless root and fails it if the setup did not finish.
func needWorld(t *testing.T) *env {
	t.Helper()
	testenv.RequireRoot(t)
	if world == nil {
		t.Fatal("k8scrio: no cluster (setup failed)")
	}
	return world
}

func setupAndRun(m *testing.M) int {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Printf("k8scrio: "+format+"\n", args...) }
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "k8scrio setup:", err); return 1 }

	// Short: CRI-O's sockets (conmon's attach sockets) live under it.
	dir, err := os.MkdirTemp("", "k8sc")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	e := &env{dir: dir}
	defer func() {
		if err := e.close(); err != nil {
			fmt.Fprintln(os.Stderr, "k8scrio teardown:", err)
		}
	}()
	if err := e.setup(ctx, logf); err != nil {
		return fail(err)
	}
	logf("setup done in %s", time.Since(start).Round(time.Millisecond))
	world = e
	code := m.Run()
	world = nil
	// The teardown's own budget: the setup's may be spent by now (the tests
	// ran as long as a loaded machine makes them).
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for name, kib := range e.c.RSS() {
		logf("RSS %-24s %6d KiB", name, kib)
	}
	if pid, err := e.d.Pid(ctx); err != nil {
		logf("RSS nri-cni unknown: %v", err)
	} else {
		logf("RSS %-24s %6d KiB", "nri-cni", cluster.RSSKiB(pid))
	}
	if err := e.d.Undeploy(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "k8scrio teardown:", err)
		code = 1
	}
	return code
}

// setup builds the image while the cluster starts on CRI-O, deploys nri-cni
// (k8sdeploy.Deploy: image loaded into CRI-O's storage, overlay applied,
// the DaemonSet's pod Ready and registered with CRI-O's NRI) and connects
// the observer.
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
		Runtime: cluster.RuntimeCRIO, PluginRequestTimeout: 2 * time.Second, Logf: logf})
	wg.Wait()
	if err != nil {
		return errors.Join(err, imgErr)
	}
	if imgErr != nil {
		return imgErr
	}
	logf("cluster on CRI-O up and image built in %s", time.Since(t0).Round(time.Millisecond))
	t1 := time.Now()
	if e.d, err = k8sdeploy.Deploy(ctx, e.c, filepath.Join(e.dir, "deploy"), tar); err != nil {
		return err
	}
	e.o = e.d.Overlay
	logf("kubectl apply -k overlay:\n%s", strings.TrimSpace(e.d.Output))
	logf("DaemonSet pod Running, Ready and registered with CRI-O in %s", time.Since(t1).Round(time.Millisecond))
	_, err = e.observer(ctx, false)
	return err
}

// observer is the NRI observer on CRI-O's socket, connected again when
// reconnect is set (CRI-O closes every plugin's connection when it
// restarts, and the NRI stub does not reconnect by itself).
func (e *env) observer(ctx context.Context, reconnect bool) (*harness.Observer, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.obs != nil && !reconnect {
		return e.obs, nil
	}
	if e.obs != nil {
		e.obs.Stop()
		e.obs = nil
	}
	rt := e.c.Runtime()
	synced := rt.CountLog(rt.PluginSynced(observerIdx + "-" + observerName))
	obs, err := harness.StartObserver(ctx, rt.NRIAddress(), observerName, observerIdx)
	if err != nil {
		return nil, err
	}
	if err := rt.WaitLog(ctx, rt.PluginSynced(observerIdx+"-"+observerName), synced+1, time.Minute); err != nil {
		obs.Stop()
		return nil, fmt.Errorf("NRI observer registered with CRI-O: %w", err)
	}
	e.obs = obs
	return obs, nil
}

// close disconnects the observer, stops the cluster (CRI-O with it), then
// undoes what the overlay set up on the host (the shared netns mount,
// nri-cni's bridge).
func (e *env) close() error {
	var errs []error
	e.mu.Lock()
	if e.obs != nil {
		e.obs.Stop()
		e.obs = nil
	}
	e.mu.Unlock()
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
