package dradevice

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/api/metadata/install"
	metadatav1alpha1 "k8s.io/dynamic-resource-allocation/api/metadata/v1alpha1"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/utils/ptr"
)

// writeMetadata writes md as the kubelet plugin helper does: the same
// object in each version, newest first, one JSON document per line.
func writeMetadata(t *testing.T, path string, md *metadata.DeviceMetadata, versions ...schema.GroupVersion) {
	t.Helper()
	codecs := serializer.NewCodecFactory(install.NewScheme())
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	require.True(t, ok)
	var buf bytes.Buffer
	for _, gv := range versions {
		data, err := runtime.Encode(codecs.EncoderForVersion(info.Serializer, gv), md)
		require.NoError(t, err)
		buf.Write(data)
		buf.WriteByte('\n')
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

func TestFileMetadata(t *testing.T) {
	root := t.TempDir()
	f := FileMetadata{KubeletDir: root}
	c := claim("pod0-sriov1-x7k2p", "sriov1", []resourceapi.DeviceRequest{firstAvailable("vf", "fast", "slow")},
		[]result{{"vf/slow", sriov, "0000-3b-02-2"}})
	path, err := f.Path(sriov, c.Namespace, c.Name, "vf")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "plugins", sriov, "dra-device-metadata", "vf-test9_pod0-sriov1-x7k2p", "vf", "metadata.json"), path)

	// No file: no metadata.
	md, err := f.DeviceMetadata(sriov, c, "vf")
	require.NoError(t, err)
	assert.Nil(t, md)

	md0 := &metadata.DeviceMetadata{
		ObjectMeta:   metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID, Generation: 1},
		PodClaimName: ptr.To("sriov1"),
		Requests: []metadata.DeviceMetadataRequest{{Name: "vf/slow", Devices: []metadata.Device{{Driver: sriov, Pool: node, Name: "0000-3b-02-2",
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"resource.kubernetes.io/pciBusID": str("0000:3b:02.2"), sriov + "/pfPciAddress": str("0000:3b:00.0")},
			NetworkData: &resourceapi.NetworkDeviceData{InterfaceName: "net1"}}}}},
	}
	writeMetadata(t, path, md0, metadatav1beta1.SchemeGroupVersion, metadatav1alpha1.SchemeGroupVersion)
	md, err = f.DeviceMetadata(sriov, c, "vf")
	require.NoError(t, err)
	require.NotNil(t, md)
	assert.Equal(t, md0.Requests, md.Requests)

	// Through the resolver: the ID from the metadata, of the subrequest.
	devs, err := (&Resolver{Metadata: f}).Resolve(c, Ref{Request: "vf"})
	require.NoError(t, err)
	require.Len(t, devs, 1)
	assert.Equal(t, SourceMetadata, devs[0].Source)
	assert.Equal(t, "0000:3b:02.2", devs[0].DeviceID)
	assert.Equal(t, "0000:3b:00.0", devs[0].Info.PCI.PFPCIAddress)
	assert.Equal(t, "net1", devs[0].NetworkData.InterfaceName)

	// Only v1alpha1 (a 1.36 driver): read too.
	writeMetadata(t, path, md0, metadatav1alpha1.SchemeGroupVersion)
	md, err = f.DeviceMetadata(sriov, c, "vf")
	require.NoError(t, err)
	require.NotNil(t, md)

	// A file of an earlier claim of the same name: not this claim's.
	stale := md0.DeepCopy()
	stale.UID = "old-uid"
	writeMetadata(t, path, stale, metadatav1beta1.SchemeGroupVersion)
	md, err = f.DeviceMetadata(sriov, c, "vf")
	require.NoError(t, err)
	assert.Nil(t, md)

	// Garbage, a symlink, a FIFO, a huge file: errors, not hangs.
	require.NoError(t, os.WriteFile(path, []byte("{not json"), 0o644))
	_, err = f.DeviceMetadata(sriov, c, "vf")
	assert.ErrorContains(t, err, path)
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Symlink("/etc/hostname", path))
	_, err = f.DeviceMetadata(sriov, c, "vf")
	assert.Error(t, err)
	require.NoError(t, os.Remove(path))
	require.NoError(t, syscall.Mkfifo(path, 0o644))
	_, err = f.DeviceMetadata(sriov, c, "vf")
	assert.ErrorContains(t, err, "not a regular file")
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte(" "), MaxMetadataSize+1), 0o644))
	_, err = f.DeviceMetadata(sriov, c, "vf")
	assert.ErrorContains(t, err, "larger than")

	// Names that are not names.
	for _, p := range [][4]string{{"..", "ns", "n", "r"}, {"d", "a/b", "n", "r"}, {"d", "ns", "", "r"}, {"d", "ns", "n", "r\x00"}} {
		_, err := f.Path(p[0], p[1], p[2], p[3])
		assert.Error(t, err, "%q", p)
	}
}

// With the host's / seen at Root, a kubelet dir that is an absolute
// symlink on the host (another disk) is followed inside Root.
func TestFileMetadataInsideRoot(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "var/lib"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "data/kubelet"), 0o755))
	require.NoError(t, os.Symlink("/data/kubelet", filepath.Join(root, "var/lib/kubelet")))
	f := FileMetadata{Root: root, KubeletDir: "/var/lib/kubelet"}
	c := claim("pod0-sriov1-x7k2p", "sriov1", []resourceapi.DeviceRequest{firstAvailable("vf", "fast", "slow")},
		[]result{{"vf/slow", sriov, "0000-3b-02-2"}})
	path, err := f.Path(sriov, c.Namespace, c.Name, "vf")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "data/kubelet/plugins", sriov, "dra-device-metadata", "vf-test9_pod0-sriov1-x7k2p", "vf", "metadata.json"), path)
	md0 := &metadata.DeviceMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID, Generation: 1},
		Requests: []metadata.DeviceMetadataRequest{{Name: "vf/slow", Devices: []metadata.Device{{Driver: sriov, Pool: node, Name: "0000-3b-02-2"}}}}}
	writeMetadata(t, path, md0, metadatav1beta1.SchemeGroupVersion)
	md, err := f.DeviceMetadata(sriov, c, "vf")
	require.NoError(t, err)
	require.NotNil(t, md, "the driver's file, found through <root>/var/lib/kubelet -> /data/kubelet")
	assert.Equal(t, md0.Requests, md.Requests)
}
