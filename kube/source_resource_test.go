package kube

import (
	"fmt"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/plan"
)

// A NAD's k8s.v1.cni.cncf.io/resourceName reaches its network (also one
// with an empty spec.config: the confDir network of its name); a name the
// kubelet could not have allocated fails the NAD, naming the annotation.
func TestNADSourceReadsTheResourceName(t *testing.T) {
	good := nad("ns1", "sriov", conflistA)
	good.Annotations = map[string]string{plan.AnnotationResourceName: "intel.com/sriov_netdevice"}
	bad := nad("ns1", "bad", conflistA)
	bad.Annotations = map[string]string{plan.AnnotationResourceName: "sriov_netdevice"}
	reserved := nad("ns1", "reserved", conflistA)
	reserved.Annotations = map[string]string{plan.AnnotationResourceName: "kubernetes.io/sriov"}
	plain := nad("ns1", "plain", conflistA)
	s := runSource(t, newNADFake(t, good, bad, reserved, plain))

	n, err := s.Network(plan.NADRef{Namespace: "ns1", Name: "sriov"})
	require.NoError(t, err)
	assert.Equal(t, "intel.com/sriov_netdevice", n.ResourceName)
	n, err = s.Network(plan.NADRef{Namespace: "ns1", Name: "plain"})
	require.NoError(t, err)
	assert.Empty(t, n.ResourceName)

	for _, name := range []string{"bad", "reserved"} {
		_, err = s.Network(plan.NADRef{Namespace: "ns1", Name: name})
		require.ErrorIs(t, err, plan.ErrBadNAD, name)
		assert.Contains(t, err.Error(), plan.AnnotationResourceName)
		assert.Contains(t, err.Error(), "ns1/"+name)
	}
}

func TestValidResourceName(t *testing.T) {
	for res, ok := range map[string]bool{
		"intel.com/sriov_netdevice": true, "vendor.example/res": true, "nvidia.com/gpu": true,
		"sriov": false, "": false, "kubernetes.io/x": false, "foo.kubernetes.io/x": false, "a/b/c": false, "intel.com/": false,
	} {
		err := plan.ValidResourceName(res)
		assert.Equal(t, ok, err == nil, "%q: %v", res, err)
	}
}

// A NAD's nri-cni.io/resourceClaim names the claim request whose device
// its network takes; a value that is not <claim>/<request>[/<sub>] of DNS
// names, or one beside k8s.v1.cni.cncf.io/resourceName, fails the NAD,
// naming the annotation.
func TestNADSourceReadsTheResourceClaim(t *testing.T) {
	tests := []struct {
		name, value, resource string
		want                  cni.ClaimRequest
		errText               string
	}{
		{"request", "vf/nic", "", cni.ClaimRequest{Claim: "vf", Request: "nic"}, ""},
		{"subrequest", "my-claim.v1/nic/fast", "", cni.ClaimRequest{Claim: "my-claim.v1", Request: "nic/fast"}, ""},
		{"no request", "vf", "", cni.ClaimRequest{}, "is not <claim>/<request>"},
		{"too deep", "vf/a/b/c", "", cni.ClaimRequest{}, "is not <claim>/<request>"},
		{"empty request", "vf/", "", cni.ClaimRequest{}, "request \"\""},
		{"bad claim", "VF_1/nic", "", cni.ClaimRequest{}, "claim \"VF_1\""},
		{"bad subrequest", "vf/nic/Fast", "", cni.ClaimRequest{}, "subrequest \"Fast\""},
		{"both annotations", "vf/nic", "intel.com/sriov", cni.ClaimRequest{}, "also has k8s.v1.cni.cncf.io/resourceName"},
	}
	var objs []*nadv1.NetworkAttachmentDefinition
	for i, tc := range tests {
		o := nad("ns1", fmt.Sprintf("n%d", i), conflistA)
		o.Annotations = map[string]string{plan.AnnotationResourceClaim: tc.value}
		if tc.resource != "" {
			o.Annotations[plan.AnnotationResourceName] = tc.resource
		}
		objs = append(objs, o)
	}
	s := runSource(t, newNADFake(t, objs...))
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := s.Network(plan.NADRef{Namespace: "ns1", Name: fmt.Sprintf("n%d", i)})
			if tc.errText != "" {
				require.ErrorIs(t, err, plan.ErrBadNAD)
				assert.Contains(t, err.Error(), plan.AnnotationResourceClaim)
				assert.Contains(t, err.Error(), fmt.Sprintf("ns1/n%d", i))
				assert.Contains(t, err.Error(), tc.errText)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, n.DeviceClaim)
			assert.Empty(t, n.ResourceName)
		})
	}
}
