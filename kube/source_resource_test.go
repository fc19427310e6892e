package kube

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
