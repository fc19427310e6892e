package plan

import (
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/cni"
)

// FuzzWithResourceName: a NAD's k8s.v1.cni.cncf.io/resourceName is tenant
// input. Whatever it holds, the network is refused (ErrBadNAD, naming the
// annotation) or carries exactly that name, a valid extended resource's;
// the shared network is never changed.
func FuzzWithResourceName(f *testing.F) {
	for _, s := range []string{"intel.com/sriov_netdevice", "", "sriov", "kubernetes.io/x", "a/b/c", "x.io/" + strings.Repeat("a", 64),
		"vendor.example/res\n", "../x", "x.io/a b", "\x00"} {
		f.Add(s)
	}
	n, err := cni.Parse([]byte(`{"cniVersion":"1.0.0","name":"net","type":"bridge"}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, res string) {
		got, err := WithResourceName(NADRef{Namespace: "ns", Name: "nad"}, n, res)
		if n.ResourceName != "" {
			t.Fatal("the shared network was changed")
		}
		if err != nil {
			if !strings.Contains(err.Error(), AnnotationResourceName) {
				t.Fatalf("refusal without the annotation's name: %v", err)
			}
			return
		}
		if got.ResourceName != res || res != "" && ValidResourceName(res) != nil {
			t.Fatalf("accepted %q as %q", res, got.ResourceName)
		}
	})
}
