// Package integration drives the real nri-cni plugin over a real NRI socket
// from the runtime side (github.com/containerd/nri/pkg/adaptation, embedded),
// with real network namespaces and the pinned reference CNI plugins. Root only.
package integration

import (
	"os"
	"testing"

	"github.com/nri-cni/nri-cni/test/testenv"
)

var recorderDir string

func TestMain(m *testing.M) {
	os.Exit(testenv.MainWithRecorder(m, &recorderDir,
		"integration: tests skip: they need root (real netns, bridge, host-local)"))
}
