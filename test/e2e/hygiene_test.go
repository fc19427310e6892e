package e2e

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
)

// Every pod a test creates carries ownerLabel with the test's token. The
// test's cleanup stops and removes its pods by listing them through CRI —
// failed ones included, whose ids never reached the test — and then fails the
// test, naming them, if any pod at all is left in the runtime. So each test
// leaves the shared containerd as it found it, and a leak is reported by the
// test that caused it, not by a later one that trips over it.
const ownerLabel = "e2e.nri-cni.io/test"

// owner is t's token (label values are limited to 63 characters).
func owner(t *testing.T) map[string]string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.Name()))
	return map[string]string{ownerLabel: fmt.Sprintf("t%x", h.Sum64())}
}

// dialCRI connects to the runtime's CRI socket for t: the pods it creates
// are t's. The caller arranges cleanupPods (newSuite does).
func dialCRI(ctx context.Context, t *testing.T, address string) *harness.CRI {
	t.Helper()
	cri, err := harness.DialCRI(ctx, address)
	require.NoError(t, err)
	cri.Labels = owner(t)
	return cri
}

// cleanupPods removes t's pods from the runtime at address, then fails t
// naming every pod still there (and removes those as well).
func cleanupPods(t *testing.T, address string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cri, err := harness.DialCRI(ctx, address)
	if err != nil {
		t.Errorf("pod cleanup: %v", err)
		return
	}
	defer cri.Close()
	if _, err := cri.RemovePods(ctx, owner(t)); err != nil {
		t.Errorf("pod cleanup: %v", err)
	}
	if left := leftoverPods(address); len(left) > 0 {
		t.Errorf("pods left in the runtime at the end of the test (removed now): %v", left)
	}
}

// cleanupPodsAt registers cleanupPods for t: it runs before the cleanups
// registered earlier (t.Cleanup is last-in, first-out).
func cleanupPodsAt(t *testing.T, address string) {
	t.Cleanup(func() { cleanupPods(t, address) })
}

// leftoverPods lists (and removes) every pod still in the runtime at address.
func leftoverPods(address string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cri, err := harness.DialCRI(ctx, address)
	if err != nil {
		return []string{err.Error()}
	}
	defer cri.Close()
	left, err := cri.RemovePods(ctx, nil)
	if err != nil {
		left = append(left, err.Error())
	}
	return left
}

// reportRuntimeTrouble prints a runtime's lines about sandboxes whose
// failed start it could not clean up (containerd keeps them listed, NOTREADY
// after a restart: the case nri-cni's resync must not attach) and about
// plugins it dropped (a handler overran its deadline, or a plugin died
// mid-request).
func reportRuntimeTrouble(rt harness.Runtime) {
	for _, line := range strings.Split(rt.LogTail(1<<30), "\n") {
		if strings.Contains(line, "encountered an error cleaning up failed sandbox") || strings.Contains(line, "closing plugin") {
			fmt.Fprintf(os.Stderr, "e2e: %s: %s\n", runtimeName(rt), line)
		}
	}
}
