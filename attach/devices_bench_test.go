package attach_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/kube/podresources"
	"github.com/nri-cni/nri-cni/kube/podresources/podresourcestest"
	"github.com/nri-cni/nri-cni/plan"
)

// BenchmarkDeviceStorm100: 100 pods attach at once, each to one network
// (the recording plugin), through the engine; "device" networks take the
// pod's device of a device plugin resource from a fake kubelet with the
// kubelet's PodResources rate limit (100/s, burst 10) and 1 ms per answer,
// "plain" networks the same NAD without resourceName. Reported: attach
// p50/p99 in ms and the kubelet's calls per pod; the ratio of the two p50s
// is the device lookup's cost.
func BenchmarkDeviceStorm100(b *testing.B) {
	const n = 100
	for _, withDevice := range []bool{false, true} {
		name := "plain"
		if withDevice {
			name = "device"
		}
		b.Run(name, func(b *testing.B) {
			dir, err := os.MkdirTemp("", "prs")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			srv, err := podresourcestest.Start(podresourcestest.Options{Dir: dir, QPS: podresourcestest.KubeletQPS,
				Burst: podresourcestest.KubeletBurst, Latency: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Stop()
			var lat []time.Duration
			var calls int
			for it := 0; it < b.N; it++ {
				b.StopTimer()
				// 100 plugin processes at once on a small machine: no cut-off.
				kf := attachtest.NewKube(b, func(c *config.Config) { c.CNITimeout = config.Duration(time.Minute) })
				nadNet := kf.NAD(plan.NADRef{Namespace: "ns1", Name: "sriov"}, "cni-sriov",
					map[string]any{"capabilities": map[string]any{"deviceID": true}})
				client, err := podresources.New(podresources.Options{Socket: srv.Socket})
				if err != nil {
					b.Fatal(err)
				}
				if withDevice {
					nadNet.ResourceName = testResource
				}
				var pods []*podresourcesv1.PodResources
				for i := 0; i < n; i++ {
					pods = append(pods, podresourcestest.Pod("ns1", fmt.Sprintf("pod-sb%d-%d", it, i), map[string][]string{testResource: {fmt.Sprintf("d%d", i)}}))
				}
				srv.SetPods(pods...)
				g0, l0 := srv.Calls()
				d := kf.Deps()
				d.Devices = kube.DeviceSource{Client: client}
				mgr := attach.New(kf.Cfg, d)
				time.Sleep(150 * time.Millisecond) // the kubelet's bucket refills between storms
				var mu sync.Mutex
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := 0; i < n; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						sb := attachtest.NPWGPod(fmt.Sprintf("sb%d-%d", it, i), `[{"name":"sriov"}]`)
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						t0 := time.Now()
						if _, err := mgr.Attach(ctx, sb); err != nil {
							b.Error(err)
						}
						mu.Lock()
						lat = append(lat, time.Since(t0))
						mu.Unlock()
					}()
				}
				b.StartTimer()
				close(start)
				wg.Wait()
				b.StopTimer()
				g1, l1 := srv.Calls()
				calls += (g1 - g0) + (l1 - l0)
				_ = client.Close()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(calls)/float64(n*b.N), "kubelet-calls/pod")
		})
	}
}
