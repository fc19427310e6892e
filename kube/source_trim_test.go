package kube

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/plan"
)

// hostileNAD is a NAD as a tenant can write it within the API server's
// limits: a 250,000-byte annotation (the total allowed is 256 KiB), labels
// by the thousand, finalizers, owner references, managed fields and
// kubectl's last-applied copy.
func hostileNAD(ns, name, config string, labels int) *nadv1.NetworkAttachmentDefinition {
	n := nad(ns, name, config)
	n.UID = types.UID("uid-" + name)
	n.ResourceVersion = "1"
	n.Annotations = map[string]string{"team.example/blob": strings.Repeat("a", 250_000),
		corev1.LastAppliedConfigAnnotation: `{"spec":{"config":"` + strings.Repeat("x", 1000) + `"}}`}
	n.Labels = map[string]string{}
	for i := range labels {
		n.Labels[fmt.Sprintf("label-%04d.example/key-%04d", i, i)] = fmt.Sprintf("value-%04d", i)
	}
	n.Finalizers = []string{"example.com/keep"}
	n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "u"}}
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	return n
}

// Issue 41 (item 1): the cache keeps of a NAD only what nri-cni reads — its
// name, namespace, uid, resourceVersion, spec.config and the two device
// annotations — and nothing a tenant can grow: no other annotation (250 KB
// each), no label (thousands), finalizer, owner reference or managed field.
// Before, only the managed fields and the last-applied copy were dropped.
func TestNADCacheHoldsNoTenantMetadata(t *testing.T) {
	n := hostileNAD("ns1", "a", conflistA, 300)
	n.Annotations[plan.AnnotationResourceName] = "intel.com/sriov"
	src := runSource(t, newNADFake(t, n))

	objs := src.informer.GetIndexer().List()
	require.Len(t, objs, 1)
	m, err := meta.Accessor(objs[0])
	require.NoError(t, err)
	assert.Equal(t, "ns1", m.GetNamespace())
	assert.Equal(t, "a", m.GetName())
	assert.Equal(t, types.UID("uid-a"), m.GetUID())
	assert.NotEmpty(t, m.GetResourceVersion())
	assert.Empty(t, m.GetLabels(), "no label")
	assert.Empty(t, m.GetAnnotations(), "no annotation in the metadata")
	assert.Empty(t, m.GetFinalizers())
	assert.Empty(t, m.GetOwnerReferences())
	assert.Empty(t, m.GetManagedFields())

	got, err := src.Network(plan.NADRef{Namespace: "ns1", Name: "a"})
	require.NoError(t, err, "what nri-cni reads is all there")
	assert.Equal(t, "net-a", got.Name)
	assert.Equal(t, "intel.com/sriov", got.ResourceName)
}

// The transform, case by case: each kept part within its bound; a part over
// it kept as its size only, and refused by it, naming the NAD and the key.
func TestSlimForCache(t *testing.T) {
	const maxConfig = 1024
	huge := `{"cniVersion":"1.0.0","name":"huge","type":"tuning","pad":"` + strings.Repeat("x", 200_000) + `"}`
	long := strings.Repeat("a", maxKeptAnnotationBytes+1)
	prefix := `{"cniVersion":"1.0.0","name":"x","type":"tuning","pad":"`
	atLimit := prefix + strings.Repeat("x", maxConfig-len(prefix)-2) + `"}`
	tests := []struct {
		name        string
		config      string
		annotations map[string]string
		want        nadContent
		wantErr     []string // the parsed verdict's error, or nil
	}{
		{name: "plain", config: conflistA, want: nadContent{config: conflistA}},
		{name: "empty config", config: "", want: nadContent{}},
		{name: "the device annotations", config: conflistA,
			annotations: map[string]string{plan.AnnotationResourceName: "intel.com/sriov", "other": "x"},
			want:        nadContent{config: conflistA, annotations: [2]keptAnnotation{{value: "intel.com/sriov"}, {}}}},
		{name: "claim annotation", config: conflistA, annotations: map[string]string{plan.AnnotationResourceClaim: "c/r"},
			want: nadContent{config: conflistA, annotations: [2]keptAnnotation{{}, {value: "c/r"}}}},
		{name: "config at the limit", config: atLimit},
		{name: "config over the limit", config: huge, want: nadContent{configBytes: len(huge)},
			wantErr: []string{"ns1/n", "spec.config: is " + strconv.Itoa(len(huge)) + " bytes, more than 1024", "kubernetes.maxNADConfigBytes"}},
		{name: "resourceName too long", config: conflistA, annotations: map[string]string{plan.AnnotationResourceName: long},
			want:    nadContent{config: conflistA, annotations: [2]keptAnnotation{{bytes: len(long)}, {}}},
			wantErr: []string{"ns1/n", "annotation " + plan.AnnotationResourceName + ": is 513 bytes, longer than any valid value"}},
		{name: "resourceClaim too long", config: conflistA, annotations: map[string]string{plan.AnnotationResourceClaim: long},
			want:    nadContent{config: conflistA, annotations: [2]keptAnnotation{{}, {bytes: len(long)}}},
			wantErr: []string{"annotation " + plan.AnnotationResourceClaim + ": is 513 bytes"}},
	}
	src := NewNADSource(newNADFake(t), NADSourceOptions{Policy: testPolicy(t), MaxConfigBytes: maxConfig})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := hostileNAD("ns1", "n", tc.config, 10)
			for k, v := range tc.annotations {
				in.Annotations[k] = v
			}
			in.ResourceVersion = "7"
			out, err := slimForCache(maxConfig)(in)
			require.NoError(t, err)
			c, ok := out.(*cachedNAD)
			require.True(t, ok, "%T", out)
			assert.Equal(t, metav1.ObjectMeta{Namespace: "ns1", Name: "n", UID: "uid-n", ResourceVersion: "7"}, c.ObjectMeta)
			if tc.want == (nadContent{}) && tc.config != "" {
				tc.want = nadContent{config: tc.config}
			}
			assert.Equal(t, tc.want, *c.cell.content)
			assert.Equal(t, NADCost("ns1", "n", "uid-n", "7", c.cell.content), c.cell.size)
			assert.LessOrEqual(t, c.cell.size, nadFixedBytes+(nadConfigCopies+nadPerObjectBytes)*maxConfig+2*maxKeptAnnotationBytes+300,
				"bounded whatever the NAD holds")

			again, err := slimForCache(maxConfig)(c)
			require.NoError(t, err)
			assert.Same(t, c, again, "its own output is kept as it is (the watch-list's temporary store)")

			_, err = src.parse(plan.NADRef{Namespace: "ns1", Name: "n"}, c.cell)
			if tc.wantErr == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, plan.ErrBadNAD)
			for _, w := range tc.wantErr {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns1/n"}
	out, err := slimForCache(maxConfig)(tomb)
	require.NoError(t, err)
	assert.Equal(t, tomb, out, "a tombstone passes")
}

// A config over the limit is refused by its size, as the API server holds
// it, with the policy's violation: the cache kept none of it.
func TestNADSourceRefusesOversizedConfigBySize(t *testing.T) {
	huge := `{"cniVersion":"1.0.0","name":"huge","type":"tuning","pad":"` + strings.Repeat("x", 200_000) + `"}`
	src := runSourceWith(t, newNADFake(t, nad("ns1", "huge", huge)), testPolicy(t), 1024)
	_, err := src.Network(plan.NADRef{Namespace: "ns1", Name: "huge"})
	require.Error(t, err)
	assert.ErrorIs(t, err, nadpolicy.ErrRefused)
	assert.Contains(t, err.Error(), "spec.config: is "+strconv.Itoa(len(huge))+" bytes, more than 1024 (kubernetes.maxNADConfigBytes")
	c, err := src.cached("ns1", "huge")
	require.NoError(t, err)
	assert.Empty(t, c.cell.content.config)
}

// heapAfterGC is the live heap, after the garbage collector settled.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// The reviewer's flood, in memory: hostile NADs (a 250,000-byte annotation
// and 3,000 labels each) in three namespaces grow the cache by about a
// kibibyte each, not by their half a megabyte (before: ~0.6 MB each).
func TestNADCacheHeapUnderAFlood(t *testing.T) {
	const n = 18
	var objs []*nadv1.NetworkAttachmentDefinition
	for i := range n {
		objs = append(objs, hostileNAD(fmt.Sprintf("flood-%d", i%3), fmt.Sprintf("n%d", i), conflistA, 3000))
	}
	client := newNADFake(t, objs...)
	objs = nil
	before := heapAfterGC()
	src := runSource(t, client)
	require.Len(t, src.List(), n) // parsed too
	grown := int64(heapAfterGC()) - int64(before)
	t.Logf("heap grown by %d KiB for %d hostile NADs", grown>>10, n)
	assert.Less(t, grown, int64(1<<20), "the cache holds no tenant metadata (before: ~3 MiB here)")
	runtime.KeepAlive(src)
}

// NADCost is what the budget counts: it must cover what a cached NAD takes
// of the heap, its parsed network included, for configs of every shape up
// to the largest allowed (one plugin, many small plugins, IPAM ranges).
func TestNADCostCoversTheHeap(t *testing.T) {
	plugin := `{"type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"1"}}`
	many := `{"cniVersion":"1.0.0","name":"many","plugins":[` + strings.Repeat(plugin+",", 230) + plugin + `]}`
	ranges := `[{"subnet":"10.251.1.0/24","rangeStart":"10.251.1.10","rangeEnd":"10.251.1.200","gateway":"10.251.1.1"}]`
	ipam := `{"cniVersion":"1.0.0","name":"ipam","type":"bridge","bridge":"br-a","ipam":{"type":"host-local","ranges":[` +
		strings.Repeat(ranges+",", 120) + ranges + `]}}`
	for _, tc := range []struct{ name, config string }{
		{"small", conflistA},
		{"one plugin, 16 KiB", `{"cniVersion":"1.0.0","name":"big","type":"tuning","pad":"` + strings.Repeat("x", 16_000) + `"}`},
		{"231 plugins", many},
		{"900 minimal plugins", `{"cniVersion":"1.0.0","name":"min","plugins":[` + strings.Repeat(`{"type":"tuning"},`, 900) + `{"type":"tuning"}]}`},
		{"121 ranges", ipam},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.LessOrEqual(t, len(tc.config), 16<<10)
			const n = 300
			objs := make([]*nadv1.NetworkAttachmentDefinition, n)
			for i := range objs {
				objs[i] = nad(fmt.Sprintf("ns%d", i%5), fmt.Sprintf("nad-%04d", i), tc.config)
				objs[i].UID = types.UID(fmt.Sprintf("0b1c2d3e-4f50-6172-8394-a5b6c7d8e9%04d", i))
				objs[i].ResourceVersion = fmt.Sprint(100000 + i)
			}
			client := newNADFake(t, objs...)
			before := heapAfterGC()
			src := runSourceOpts(t, client, NADSourceOptions{Policy: testPolicy(t), MaxCacheBytes: 1 << 30})
			for _, e := range src.List() {
				require.NoError(t, e.Err)
			}
			grown := int64(heapAfterGC()) - int64(before)
			cost := 0
			for _, o := range objs {
				cost += NADCost(o.Namespace, o.Name, string(o.UID), o.ResourceVersion, contentOf(o, 16<<10))
			}
			t.Logf("%d NADs of a %d-byte config: heap %d bytes each, cost %d each", n, len(tc.config), grown/n, cost/n)
			assert.Less(t, grown, int64(cost), "NADCost covers the heap")
			runtime.KeepAlive(src)
		})
	}
}
