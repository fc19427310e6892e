package dra

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/state"
)

// The kubelet's DRA checkpoint, from fixture files in its format (1.37's
// devices carry a ShareID, 1.34's do not): the claims it holds as prepared
// by nri-cni.io are those whose nri-cni.io state lists devices; a claim
// still being prepared (no devices yet) and another driver's claim are not.
func TestReadKubeletClaims(t *testing.T) {
	want := []state.HeldClaim{
		{UID: "0f6c1a52-0001-4c1e-9d3b-000000000001", Namespace: "team-a", Name: "app-net-x7k2p", Pods: []string{"pod-a"},
			Devices: []state.HeldDevice{{Requests: []string{"storage"}, Pool: "node-1", Device: "net-storage"},
				{Requests: []string{"fast/macvlan"}, Pool: "node-1", Device: "net-fast"}}},
		{UID: "0f6c1a52-0004-4c1e-9d3b-000000000004", Namespace: "team-b", Name: "web-net", Pods: []string{"pod-d", "pod-e"},
			Devices: []state.HeldDevice{{Requests: []string{"web"}, Pool: "node-1", Device: "net-web"}}},
	}
	for _, tc := range []struct {
		file string
		want []state.HeldClaim
		err  error
		msg  string
	}{
		{file: "v1.37", want: want},
		{file: "v1.34", want: want},
		{file: "empty"},
		{file: "corrupt", err: ErrCheckpointCorrupt, msg: "checksum"},
		{file: "other-version", err: ErrCheckpointVersion, msg: `apiVersion "checkpoint.dra.kubelet.k8s.io/v2"`},
		{file: "truncated", err: ErrCheckpointCorrupt},
		{file: "absent", err: os.ErrNotExist},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "kubelet", tc.file)
			got, err := ReadKubeletClaims(path, DriverName)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				assert.Contains(t, err.Error(), tc.msg)
				assert.Contains(t, err.Error(), path)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	gpu, err := ReadKubeletClaims(filepath.Join("testdata", "kubelet", "v1.37"), "gpu.example.com")
	require.NoError(t, err)
	assert.Len(t, gpu, 2, "another driver's claims are its own")
}

// Through the host's root where this process may read it (a privileged
// container in the host's PID namespace), else as the path is.
func TestCheckpointPath(t *testing.T) {
	prefix := ""
	if _, err := os.Stat("/proc/1/root/"); err == nil {
		prefix = "/proc/1/root"
	}
	t.Logf("the host's root through /proc/1/root: %v", prefix != "")
	assert.Equal(t, prefix+"/var/lib/kubelet/dra_manager_state", CheckpointPath("/var/lib/kubelet"))
	assert.Equal(t, prefix+"/srv/kubelet/dra_manager_state", CheckpointPath("/srv/kubelet/"))
}
