package podresources_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nri-cni/nri-cni/kube/podresources"
	"github.com/nri-cni/nri-cni/kube/podresources/podresourcestest"
)

// N lookups of one pod at once cost one Get; N lookups of N pods beyond
// MaxParallelGets share one List.
func TestCoalescing(t *testing.T) {
	const n = 50
	for _, tc := range []struct {
		name                string
		fake                podresourcestest.Options
		opts                podresources.Options
		samePod, warmup     bool // warmup: one lookup first (learns Get is unsupported)
		wantGets, wantLists int  // calls during the N lookups
	}{
		{name: "one pod, Get", samePod: true, wantGets: 1},
		{name: "one pod, Get unsupported: one Get then one List", fake: podresourcestest.Options{GetMode: podresourcestest.GetUnimplemented},
			samePod: true, wantGets: 1, wantLists: 1},
		{name: "many pods, Get unsupported (known): the finished List serves them", fake: podresourcestest.Options{GetMode: podresourcestest.GetDisabled},
			opts: podresources.Options{ListReuse: time.Minute}, warmup: true, wantLists: 0},
		{name: "many pods, List only", opts: podresources.Options{MaxParallelGets: -1}, wantLists: 1},
		{name: "many pods, 4 Gets then one List", opts: podresources.Options{MaxParallelGets: 4}, wantGets: 4, wantLists: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := fakeKubelet(t, tc.fake, tc.opts)
			var pods []*podresourcesv1.PodResources
			for i := 0; i < n; i++ {
				pods = append(pods, podresourcestest.Pod("team-a", fmt.Sprintf("p%d", i), map[string][]string{res: {fmt.Sprintf("d%d", i)}}))
			}
			srv.SetPods(pods...)
			if tc.warmup {
				if _, err := c.DeviceIDs(context.Background(), pod("p0"), res); err != nil {
					t.Fatal(err)
				}
			}
			g0, l0 := srv.Calls()
			c0 := c.Stats().Coalesced
			release := srv.Hold()
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := 0; i < n; i++ {
				name := "p0"
				if !tc.samePod {
					name = fmt.Sprintf("p%d", i)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					p := pod(name)
					p.UID = fmt.Sprintf("u%d", i) // no cache hits: every lookup needs the kubelet
					var ids []string
					ids, errs[i] = c.DeviceIDs(ctx, p, res)
					if errs[i] == nil && ids[0] != "d"+strings.TrimPrefix(name, "p") {
						errs[i] = fmt.Errorf("%s got %v", name, ids)
					}
				}()
			}
			// Release once every lookup waits on a call.
			waitFor(t, func() bool {
				g, l := srv.Calls()
				return c.Stats().Coalesced-c0+(g-g0)+(l-l0) >= n
			})
			release()
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			g, l := srv.Calls()
			if g-g0 != tc.wantGets || l-l0 != tc.wantLists {
				t.Errorf("%d lookups: the kubelet got %d Gets and %d Lists, want %d and %d", n, g-g0, l-l0, tc.wantGets, tc.wantLists)
			}
			t.Logf("%d lookups: %d Gets, %d Lists; stats %+v", n, g-g0, l-l0, c.Stats())
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A storm against the kubelet's own rate limit (100/s, burst 10), our
// client limit off: every lookup succeeds, with few calls.
func TestStormUnderKubeletRateLimit(t *testing.T) {
	const n = 100
	srv, c := fakeKubelet(t, podresourcestest.Options{QPS: podresourcestest.KubeletQPS, Burst: podresourcestest.KubeletBurst, Latency: 2 * time.Millisecond},
		podresources.Options{QPS: -1})
	var pods []*podresourcesv1.PodResources
	for i := 0; i < n; i++ {
		pods = append(pods, podresourcestest.Pod("team-a", fmt.Sprintf("p%d", i), map[string][]string{res: {fmt.Sprintf("d%d", i)}}))
	}
	srv.SetPods(pods...)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, errs[i] = c.DeviceIDs(ctx, pod(fmt.Sprintf("p%d", i)), res)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	g, l := srv.Calls()
	if g+l > 20 {
		t.Errorf("%d pods: %d Gets + %d Lists, want ≤ 20 calls", n, g, l)
	}
	t.Logf("%d pods: %d Gets, %d Lists, %d refused by the rate limit; stats %+v", n, g, l, srv.RateLimited(), c.Stats())
}

// A List answer that started before the pod was admitted does not make it
// "not found": a fresh List is made.
func TestOlderAnswerDoesNotHidePod(t *testing.T) {
	srv, c := fakeKubelet(t, podresourcestest.Options{GetMode: podresourcestest.GetUnimplemented}, podresources.Options{ListReuse: time.Minute})
	srv.SetPods(podresourcestest.Pod("team-a", "early", map[string][]string{res: {"d0"}}))
	ctx := context.Background()
	if _, err := c.DeviceIDs(ctx, pod("early"), res); err != nil {
		t.Fatal(err)
	}
	srv.AddPod(podresourcestest.Pod("team-a", "late", map[string][]string{res: {"d1"}}))
	_, l0 := srv.Calls()
	got, err := c.DeviceIDs(ctx, pod("late"), res)
	if err != nil || fmt.Sprint(got) != "[d1]" {
		t.Fatalf("late pod: %v, %v", got, err)
	}
	if _, l := srv.Calls(); l != l0+1 {
		t.Errorf("Lists: %d, want %d (one fresh List)", l, l0+1)
	}
	// A third pod, present in the reused answer: no call.
	srv.AddPod(podresourcestest.Pod("team-a", "third", map[string][]string{res: {"d2"}}))
	_, l1 := srv.Calls()
	p := pod("early")
	p.UID = "another"
	if _, err := c.DeviceIDs(ctx, p, res); err != nil {
		t.Fatal(err)
	}
	if _, l := srv.Calls(); l != l1 {
		t.Errorf("a pod in a List answer within ListReuse: %d Lists, want %d", l, l1)
	}
}

// No kubelet socket yet (the kubelet restarting): lookups retry until it
// serves, within their deadline.
func TestKubeletComesBack(t *testing.T) {
	dir, err := os.MkdirTemp("", "prs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := podresources.New(podresources.Options{Socket: dir + "/kubelet.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	_, err = c.DeviceIDs(ctx, pod("web"), res)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Unavailable") {
		t.Fatalf("no kubelet: %v, want the deadline naming Unavailable", err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		srv, err := podresourcestest.Start(podresourcestest.Options{Dir: dir})
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(srv.Stop)
		srv.SetPods(podresourcestest.Pod("team-a", "web", map[string][]string{res: {"d0"}}))
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	got, err := c.DeviceIDs(ctx, pod("web"), res)
	if err != nil || fmt.Sprint(got) != "[d0]" {
		t.Fatalf("after the kubelet came back: %v, %v", got, err)
	}
	t.Logf("answered %s after the lookup began; stats %+v", time.Since(t0).Round(time.Millisecond), c.Stats())
}
