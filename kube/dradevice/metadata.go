package dradevice

// KEP-5304 device metadata as the kubelet plugin helper of
// k8s.io/dynamic-resource-allocation writes it on the node (alpha in
// Kubernetes 1.36, beta in 1.37; on when the driver enables it, e.g.
// dra-driver-sriov --enable-device-metadata in its standalone mode): one
// file per claim request,
//
//	<kubelet root>/plugins/<driver>/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json
//
// a JSON stream of the same DeviceMetadata in each API version the driver
// writes (metadata.resource.k8s.io/v1beta1, maybe v1alpha1), bind-mounted
// read-only into the pod's containers through CDI. The helper writes it
// when PrepareResourceClaims returns, before the kubelet creates the
// sandbox; a driver may update it later (networkData, from its own NRI
// hook). FileMetadata reads it with the library's decoder.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"

	"github.com/nri-cni/nri-cni/hostroot"
)

// MaxMetadataSize bounds a metadata file: a request has at most 32
// devices, each at most 32 attributes of at most 64-byte values, written
// in two versions: far below 1 MiB.
const MaxMetadataSize = 1 << 20

// metadataSubdir is the helper's directory in the driver's plugin dir.
const metadataSubdir = "dra-device-metadata"

// FileMetadata reads drivers' metadata files under KubeletDir (the
// kubelet's --root-dir, /var/lib/kubelet by default), a host path. Root is
// where the host's / is seen (nri.conf pluginRoot, whose mount shows the
// files; "" = this process's own /: the DaemonSet then needs
// <KubeletDir>/plugins mounted read-only at its path).
type FileMetadata struct {
	KubeletDir string
	Root       string
}

// Path is the metadata file of driver for claim namespace/name's request,
// where it is opened: its directory resolved inside Root (hostroot.Path: a
// symlink on the way, such as a kubelet dir moved to another disk, leads
// where the host has it); the file's own name is never followed.
func (f FileMetadata) Path(driver, namespace, name, request string) (string, error) {
	for _, p := range []string{driver, namespace, name, request} {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, "/\x00") {
			return "", fmt.Errorf("device metadata path: %q is not a name", printable(p))
		}
	}
	dir := filepath.Join(f.KubeletDir, "plugins", driver, metadataSubdir, namespace+"_"+name, request)
	in, err := hostroot.Path(f.Root, dir)
	if err != nil {
		return "", fmt.Errorf("device metadata directory %s under %s: %w", dir, f.Root, err)
	}
	return filepath.Join(in, "metadata.json"), nil
}

// DeviceMetadata implements MetadataReader. No file, or a file of
// another claim of the same name (its UID differs: left from a claim
// deleted and made again), is no metadata.
func (f FileMetadata) DeviceMetadata(driver string, claim *resourceapi.ResourceClaim, request string) (*metadata.DeviceMetadata, error) {
	p, err := f.Path(driver, claim.Namespace, claim.Name, request)
	if err != nil {
		return nil, err
	}
	data, err := readBounded(p, MaxMetadataSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var md metadata.DeviceMetadata
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(strings.NewReader(string(data))), &md); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if md.UID != claim.UID || md.Namespace != claim.Namespace || md.Name != claim.Name {
		return nil, nil
	}
	return &md, nil
}

// readBounded reads a regular file (not a symlink, FIFO or device) of at
// most max bytes.
func readBounded(p string, max int64) ([]byte, error) {
	fd, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	data, err := io.ReadAll(io.LimitReader(fd, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", p, max)
	}
	return data, nil
}
