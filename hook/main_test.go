package hook

import (
	"os"
	"testing"

	"github.com/nri-cni/nri-cni/test/testenv"
)

// recorderDir holds the fake CNI plugin, built once for the package.
var recorderDir string

func TestMain(m *testing.M) {
	os.Exit(testenv.MainWithRecorder(m, &recorderDir, ""))
}
