// Package e2e runs nri-cni against a real containerd 2.x and a real CRI-O
// 1.36 (started by the harness with NRI on private sockets; CRI-O twice: infra
// container kept and dropped), real runc, the reference CNI plugins and a CRI
// client over gRPC. Root only; in `make test` and `make e2e`.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// world is shared by the package's tests: one containerd and two CRI-Os
// (tests attach their own nri-cni to them, one at a time), the binaries and
// the pause image.
var world struct {
	dir         string
	tools       harness.Tools
	ctd         *harness.Containerd
	crioKept    *harness.CRIO // drop_infra_ctr = false: NRI gets the pause pid
	crioDropped *harness.CRIO // drop_infra_ctr = true (the kubelet's setup): NRI Pid 0
	runtimes    []harness.Runtime
	bin         string // nri-cni
	recorderDir string
	pauseTar    string
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: tests skip: they need root (containerd, runc, netns)")
		os.Exit(m.Run())
	}
	os.Exit(setupAndRun(m))
}

func setupAndRun(m *testing.M) int {
	// Builds get a generous deadline of their own: on a loaded machine a cold
	// go build of the pause image alone has taken minutes. Starting the
	// runtimes gets its own, shorter one once everything is built.
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancelBuild()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "e2e setup:", err); return 1 }

	dir, err := os.MkdirTemp("", "e2e")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	world.dir = dir
	if world.tools, err = harness.EnsureTools(); err != nil {
		return fail(err)
	}
	if world.bin, err = harness.GoBuild(dir, "./cmd/nri-cni", "nri-cni"); err != nil {
		return fail(err)
	}
	world.recorderDir = filepath.Join(dir, "recorder")
	if err := os.MkdirAll(world.recorderDir, 0o755); err != nil {
		return fail(err)
	}
	if _, err := testenv.BuildRecorder(world.recorderDir); err != nil {
		return fail(err)
	}
	world.pauseTar = filepath.Join(dir, "pause.tar")
	if err := harness.BuildPauseImageTar(buildCtx, dir, world.pauseTar); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := startWorld(ctx, dir); err != nil {
		closeWorld()
		return fail(err)
	}
	code := m.Run()
	for _, rt := range world.runtimes {
		reportRuntimeTrouble(rt)
		if left := leftoverPods(rt.CRIAddress()); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "e2e teardown: pods left in the shared %s: %v\n", runtimeName(rt), left)
			code = 1
		}
	}
	if !closeWorld() {
		code = 1
	}
	return code
}

// startWorld starts the shared runtimes side by side: containerd and the two
// CRI-Os (each loads the pause image into its own storage).
func startWorld(ctx context.Context, dir string) error {
	var wg sync.WaitGroup
	var ctdErr, keptErr, droppedErr error
	wg.Add(3)
	go func() { defer wg.Done(); world.ctd, ctdErr = startContainerd(ctx, filepath.Join(dir, "ctd")) }()
	go func() { defer wg.Done(); world.crioKept, keptErr = startCRIO(ctx, filepath.Join(dir, "ck"), false) }()
	go func() {
		defer wg.Done()
		world.crioDropped, droppedErr = startCRIO(ctx, filepath.Join(dir, "cd"), true)
	}()
	wg.Wait()
	if err := errors.Join(ctdErr, keptErr, droppedErr); err != nil {
		return err
	}
	world.runtimes = []harness.Runtime{world.ctd, world.crioKept, world.crioDropped}
	return nil
}

// closeWorld stops the shared runtimes (those that started) and reports
// what they left behind; false if anything went wrong.
func closeWorld() bool {
	ok := true
	if world.ctd != nil {
		if err := world.ctd.Close(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "e2e teardown: containerd:", err)
			ok = false
		}
	}
	for _, c := range []*harness.CRIO{world.crioKept, world.crioDropped} {
		if c == nil {
			continue
		}
		if err := c.Close(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "e2e teardown:", runtimeName(c), err)
			ok = false
		}
		if left := c.Leftovers(); len(left) > 0 {
			fmt.Fprintln(os.Stderr, "e2e teardown: left behind by", runtimeName(c), left)
			ok = false
		}
	}
	return ok
}

// startCRIO starts a private CRI-O in dir with the shared pause image.
func startCRIO(ctx context.Context, dir string, dropInfra bool) (*harness.CRIO, error) {
	return harness.StartCRIO(ctx, harness.CRIOOpts{Dir: dir, Tools: world.tools, CRIOBinDir: world.tools.CRIODir,
		DropInfra: dropInfra, PauseTar: world.pauseTar})
}

// startContainerd starts a private containerd in dir and imports the pause
// image into it. edit may change the options.
// privateContainerd starts a containerd of the test's own (startContainerd
// in a short temp dir: unix socket paths) and stops and removes it at the
// test's end.
func privateContainerd(ctx context.Context, t *testing.T, edit ...func(*harness.ContainerdOpts)) *harness.Containerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctd")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctd, err := startContainerd(ctx, dir, edit...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, ctd.Close(context.Background())) })
	return ctd
}

func startContainerd(ctx context.Context, dir string, edit ...func(*harness.ContainerdOpts)) (*harness.Containerd, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	opts := harness.ContainerdOpts{Dir: dir, Tools: world.tools}
	for _, e := range edit {
		e(&opts)
	}
	ctd, err := harness.StartContainerd(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := harness.ImportImage(ctx, filepath.Join(world.tools.ContainerdDir, "ctr"), ctd.Address, world.pauseTar); err != nil {
		_ = ctd.Close(ctx)
		return nil, err
	}
	return ctd, nil
}

// pluginSetup gives a test its own secondary network (bridge deleted at
// cleanup) and nri-cni config under dir, written to dir/nri.conf.
func pluginSetup(t *testing.T, dir string, extra ...map[string]any) (harness.Secondary, harness.PluginConfig, string) {
	t.Helper()
	sec := harness.NewSecondary(dir)
	sec.Extra = extra
	t.Cleanup(sec.DeleteBridge)
	cfg, err := harness.NewPluginConfig(dir, world.tools, sec, world.recorderDir)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "nri.conf")
	if err := cfg.Write(cfgPath); err != nil {
		t.Fatal(err)
	}
	return sec, cfg, cfgPath
}
