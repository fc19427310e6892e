package podresources_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nri-cni/nri-cni/kube/podresources"
	"github.com/nri-cni/nri-cni/kube/podresources/podresourcestest"
)

// BenchmarkStorm100: 100 pods look up their device at the same instant,
// against a fake kubelet with the kubelet's rate limit (100/s, burst 10) and
// 1 ms per answer. Each iteration is a fresh client (no cache) and fresh pod
// UIDs. Reported: kubelet calls per pod, lookup latency p50/p99, failed
// lookups per pod. "multus-like" is one List per pod, no retry, as Multus
// v4.2/v4.3 asks (pkg/kubeletclient): its failures are issue #1545.
func BenchmarkStorm100(b *testing.B) {
	const n = 100
	for _, bc := range []struct {
		name string
		opts *podresources.Options // nil: multus-like
	}{
		{"nri-cni", &podresources.Options{}},
		{"nri-cni-list-only", &podresources.Options{MaxParallelGets: -1}},
		{"nri-cni-get-only", &podresources.Options{MaxParallelGets: 1000}},
		{"multus-like", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv, _ := fakeKubelet(b, podresourcestest.Options{QPS: podresourcestest.KubeletQPS, Burst: podresourcestest.KubeletBurst, Latency: time.Millisecond}, podresources.Options{})
			var pods []*podresourcesv1.PodResources
			for i := 0; i < n; i++ {
				pods = append(pods, podresourcestest.Pod("team-a", fmt.Sprintf("p%d", i), map[string][]string{res: {fmt.Sprintf("d%d", i)}}))
			}
			srv.SetPods(pods...)
			var lat []time.Duration
			failed := 0
			g0, l0 := srv.Calls()
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				b.StopTimer()
				time.Sleep(150 * time.Millisecond) // the kubelet's bucket refills between storms
				b.StartTimer()
				lookup, done := stormClient(b, srv.Socket, bc.opts)
				var mu sync.Mutex
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := 0; i < n; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						t0 := time.Now()
						err := lookup(ctx, podresources.Pod{Namespace: "team-a", Name: fmt.Sprintf("p%d", i), UID: fmt.Sprintf("%d-%d", it, i)})
						d := time.Since(t0)
						mu.Lock()
						defer mu.Unlock()
						lat = append(lat, d)
						if err != nil {
							failed++
						}
					}()
				}
				close(start)
				wg.Wait()
				done()
			}
			b.StopTimer()
			g, l := srv.Calls()
			slices.Sort(lat)
			b.ReportMetric(float64(g-g0+l-l0)/float64(n*b.N), "calls/pod")
			b.ReportMetric(float64(failed)/float64(n*b.N), "failed/pod")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.Logf("b.N=%d: %d Gets, %d Lists, %d refused by the kubelet's rate limit, %d of %d lookups failed", b.N, g-g0, l-l0, srv.RateLimited(), failed, n*b.N)
		})
	}
}

// stormClient returns a lookup for one storm and a function that closes it.
func stormClient(b *testing.B, socket string, o *podresources.Options) (func(context.Context, podresources.Pod) error, func()) {
	if o != nil {
		opts := *o
		opts.Socket = socket
		c, err := podresources.New(opts)
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, p podresources.Pod) error {
			_, err := c.DeviceIDs(ctx, p, res)
			return err
		}, func() { _ = c.Close() }
	}
	// Multus: a connection and one List per pod, no retry.
	return func(ctx context.Context, p podresources.Pod) error {
		conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
		if err != nil {
			return err
		}
		for _, pr := range resp.GetPodResources() {
			if pr.GetNamespace() == p.Namespace && pr.GetName() == p.Name {
				return nil
			}
		}
		return fmt.Errorf("pod %s not listed", p)
	}, func() {}
}
