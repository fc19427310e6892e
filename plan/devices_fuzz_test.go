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

// FuzzWithResourceClaim: a NAD's nri-cni.io/resourceClaim is tenant input.
// Whatever it holds, the network is refused (ErrBadNAD, naming the
// annotation) or names a claim and a request of DNS names that rejoin to
// the value; the shared network is never changed.
func FuzzWithResourceClaim(f *testing.F) {
	for _, s := range []string{"nics/data", "nics/data/fast", "", "nics", "a/b/c/d", "/data", "nics/", "NICS/data",
		"nics/data\n", "../x/y", "x/" + strings.Repeat("a", 64), "\x00/\x00", "my.claim/req"} {
		f.Add(s)
	}
	n, err := cni.Parse([]byte(`{"cniVersion":"1.0.0","name":"net","type":"bridge"}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := WithResourceClaim(NADRef{Namespace: "ns", Name: "nad"}, n, v)
		if !n.DeviceClaim.IsZero() {
			t.Fatal("the shared network was changed")
		}
		if err != nil {
			if !strings.Contains(err.Error(), AnnotationResourceClaim) {
				t.Fatalf("refusal without the annotation's name: %v", err)
			}
			return
		}
		if v == "" {
			if !got.DeviceClaim.IsZero() {
				t.Fatalf("an empty value named %v", got.DeviceClaim)
			}
			return
		}
		if got.DeviceClaim.String() != v || strings.ContainsAny(v, "\x00\n ") || len(got.DeviceClaim.Request) == 0 {
			t.Fatalf("accepted %q as %+v", v, got.DeviceClaim)
		}
	})
}
