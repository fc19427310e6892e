package dra

// The kubelet's DRA checkpoint, read only: which claims the kubelet holds as
// prepared on this node, for which pods, by which driver. The kubelet's DRA
// manager keeps it at <root-dir>/dra_manager_state (Kubernetes 1.34 to 1.37
// write the same format): a JSON object {"Data": <string>, "Checksum":
// <uint32>}, where Checksum is the CRC-32 (IEEE) of Data's bytes and Data is
// a JSON document of kind DRACheckpoint, apiVersion
// checkpoint.dra.kubelet.k8s.io/v1, whose ClaimInfoStateList holds one entry
// per claim: ClaimUID, ClaimName, Namespace, PodUIDs (an object whose keys
// are the pods' UIDs) and DriverState (driver name -> {Devices: [{PoolName,
// DeviceName, ShareID, RequestNames, CDIDeviceIDs}]}).
//
// The kubelet writes an entry before it calls the drivers (DriverState
// names every driver of the claim's allocation, with no devices) and again
// once they prepared it, with the devices each returned: an entry whose
// nri-cni.io state lists devices is a claim nri-cni prepared, which the
// kubelet will not ask it to prepare again until the kubelet restarts. A
// checksum that does not match, or another kind or version, is refused,
// never guessed at.
//
// Where it is read from: the DaemonSet runs in the host's PID namespace
// (hostPID, for the pods' network namespaces) and privileged, so the file
// is read through /proc/1/root, the host's root as its init sees it
// (CheckpointPath). No mount is added for it: the kubelet replaces the file
// by a rename, which a bind mount of the file alone would not follow, and a
// mount of the kubelet's directory would show nri-cni every pod's volumes,
// secrets included.

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/nri-cni/nri-cni/hostroot"
	"github.com/nri-cni/nri-cni/state"
)

// The kubelet's DRA checkpoint: its file under the kubelet's root dir, its
// kind and apiVersion.
const (
	CheckpointFile       = "dra_manager_state"
	checkpointKind       = "DRACheckpoint"
	checkpointAPIVersion = "checkpoint.dra.kubelet.k8s.io/v1"
	// hostRoot is the host's root directory as seen from a container in
	// the host's PID namespace (and "/" outside one).
	hostRoot = "/proc/1/root"
	// maxCheckpointBytes bounds what is read (the kubelet's file holds a
	// few hundred bytes per claim).
	maxCheckpointBytes = 32 << 20
)

// Errors of the kubelet's checkpoint.
var (
	ErrCheckpointCorrupt = errors.New("the kubelet's DRA checkpoint is corrupt")
	// ErrCheckpointChecksum comes with ErrCheckpointCorrupt.
	ErrCheckpointChecksum = errors.New("its checksum does not match its data")
	ErrCheckpointVersion  = errors.New("the kubelet's DRA checkpoint is of a kind or version nri-cni does not read")
)

// Why the kubelet's checkpoint cannot be read (CheckpointReason): the
// label values of nri_cni_dra_checkpoint_unreadable, a bounded set.
const (
	CheckpointMissing    = "missing"    // no such file (another kubeletDir, or not in the host's PID namespace)
	CheckpointPermission = "permission" // closed to nri-cni
	CheckpointVersion    = "version"    // a kind or version nri-cni does not read (a newer kubelet)
	CheckpointChecksum   = "checksum"   // its checksum does not match
	CheckpointCorrupt    = "corrupt"    // not the kubelet's JSON, or too large
	CheckpointReadError  = "read-error" // any other error of reading it
)

// CheckpointReasons are every CheckpointReason.
var CheckpointReasons = []string{CheckpointMissing, CheckpointPermission, CheckpointVersion, CheckpointChecksum,
	CheckpointCorrupt, CheckpointReadError}

// CheckpointReason classes an error of ReadKubeletClaims.
func CheckpointReason(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return CheckpointMissing
	case errors.Is(err, fs.ErrPermission):
		return CheckpointPermission
	case errors.Is(err, ErrCheckpointVersion):
		return CheckpointVersion
	case errors.Is(err, ErrCheckpointChecksum):
		return CheckpointChecksum
	case errors.Is(err, ErrCheckpointCorrupt):
		return CheckpointCorrupt
	}
	return CheckpointReadError
}

// CheckpointPath is where nri-cni reads the kubelet's checkpoint: in the
// kubelet's root dir under the host's root (hostRoot) where that can be
// read, else in the kubelet's root dir as this process sees it (nri-cni
// run on the host where its init's root is closed to it, or the admin
// mounted the kubelet's dir at its host path). Under hostRoot the path is
// resolved inside it (hostroot.Path), when asked: the kernel would resolve
// an absolute symlink on the way (a kubelet dir moved to another disk) in
// this process's own root.
func CheckpointPath(kubeletRoot string) string { return checkpointPath(hostRoot, kubeletRoot) }

func checkpointPath(root, kubeletRoot string) string {
	p := filepath.Join(kubeletRoot, CheckpointFile)
	if _, err := os.Stat(root + "/"); err != nil {
		return p
	}
	in, err := hostroot.Path(root, p)
	if err != nil {
		return filepath.Join(root, p) // reading it says what is wrong
	}
	return in
}

// kubeletCheckpoint is the file; kubeletCheckpointData is its Data.
type kubeletCheckpoint struct {
	Data     *string `json:"Data"`
	Checksum *uint32 `json:"Checksum"`
}

type kubeletCheckpointData struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Claims     []struct {
		ClaimUID    string              `json:"ClaimUID"`
		ClaimName   string              `json:"ClaimName"`
		Namespace   string              `json:"Namespace"`
		PodUIDs     map[string]struct{} `json:"PodUIDs"`
		DriverState map[string]struct {
			Devices []struct {
				PoolName     string   `json:"PoolName"`
				DeviceName   string   `json:"DeviceName"`
				RequestNames []string `json:"RequestNames"`
			} `json:"Devices"`
		} `json:"DriverState"`
	} `json:"ClaimInfoStateList"`
}

// ReadKubeletClaims reads the kubelet's checkpoint at path and returns the
// claims it holds as prepared by driver, by namespace/name.
func ReadKubeletClaims(path, driver string) ([]state.HeldClaim, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's DRA checkpoint: %w", err) // the PathError names it
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCheckpointBytes+1))
	if err != nil {
		return nil, fmt.Errorf("the kubelet's DRA checkpoint %s: %w", path, err)
	}
	if len(data) > maxCheckpointBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrCheckpointCorrupt, path, maxCheckpointBytes)
	}
	held, err := ParseKubeletCheckpoint(data, driver)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return held, nil
}

// ParseKubeletCheckpoint parses the kubelet's checkpoint file's bytes and
// returns the claims it holds as prepared by driver (its state lists
// devices), by namespace/name.
func ParseKubeletCheckpoint(file []byte, driver string) ([]state.HeldClaim, error) {
	var cp kubeletCheckpoint
	if err := json.Unmarshal(file, &cp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointCorrupt, err)
	}
	if cp.Data == nil || cp.Checksum == nil {
		return nil, fmt.Errorf("%w: no Data or no Checksum", ErrCheckpointCorrupt)
	}
	if sum := crc32.ChecksumIEEE([]byte(*cp.Data)); sum != *cp.Checksum {
		return nil, fmt.Errorf("%w: %w (checksum %d, its data sums to %d)", ErrCheckpointCorrupt, ErrCheckpointChecksum, *cp.Checksum, sum)
	}
	var d kubeletCheckpointData
	if err := json.Unmarshal([]byte(*cp.Data), &d); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointCorrupt, err)
	}
	if d.Kind != checkpointKind || d.APIVersion != checkpointAPIVersion {
		return nil, fmt.Errorf("%w: kind %q apiVersion %q (want %q %q)", ErrCheckpointVersion, d.Kind, d.APIVersion,
			checkpointKind, checkpointAPIVersion)
	}
	var out []state.HeldClaim
	for _, c := range d.Claims {
		ds, ok := c.DriverState[driver]
		if !ok || len(ds.Devices) == 0 {
			continue // not this driver's, or not prepared (yet)
		}
		h := state.HeldClaim{UID: c.ClaimUID, Namespace: c.Namespace, Name: c.ClaimName}
		for uid := range c.PodUIDs {
			h.Pods = append(h.Pods, uid)
		}
		sort.Strings(h.Pods)
		for _, dev := range ds.Devices {
			h.Devices = append(h.Devices, state.HeldDevice{Requests: dev.RequestNames, Pool: dev.PoolName, Device: dev.DeviceName})
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out, nil
}
