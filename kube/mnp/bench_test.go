package mnp

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
)

// BenchmarkPeerIndexMemory: the heap the index keeps for n multi-networked
// pods of other nodes (500 namespaces; 5 labels, one secondary network
// with a v4 and a v6 address, two named ports each), fed as the reflector
// does: each pod reduced by the store's transform as it arrives (the full
// object becomes garbage), then Replace. Design row 12e: ≤ 40 MiB at 10k.
func BenchmarkPeerIndexMemory(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				c := newCache(node, netpol.DefaultLimits())
				s := &podStore{node: node, apply: c.applyPod, reset: c.resetPods}
				tr := s.Transformer()
				reduced := make([]any, n)
				for i := range n {
					ns := fmt.Sprint("tenant-", i%500)
					p := pod(ns, fmt.Sprint("app-", i), fmt.Sprint("node-", i%1000),
						status("*cbr0=10.244.0.1", fmt.Sprintf("%s/data=10.%d.%d.%d,fd00::%x", ns, i>>16&255, i>>8&255, i&255, i)),
						map[string]string{"app": fmt.Sprint("app-", i%50), "pod-template-hash": fmt.Sprintf("%08x", i/10),
							"team": fmt.Sprint("team-", i%20), "version": "v1", "tier": "backend"})
					reduced[i], _ = tr(p)
				}
				_ = s.Replace(reduced, "1")
				reduced = nil
				runtime.GC()
				runtime.ReadMemStats(&after)
				kept := 0
				for _, m := range c.pods {
					kept += len(m)
				}
				if kept != n {
					b.Fatalf("%d pods kept, want %d", kept, n)
				}
				used := float64(after.HeapAlloc) - float64(before.HeapAlloc)
				b.ReportMetric(used/(1<<20), "MiB")
				b.ReportMetric(used/float64(n), "B/pod")
				runtime.KeepAlive(c)
			}
		})
	}
}
