package cli

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
)

// dumpStatsOnSIGUSR1 logs a one-line health summary on each SIGUSR1:
// goroutines, heap, records on disk. `kill -USR1 <pid>` is an operator's
// (and the soak test's) window into a running plugin.
func dumpStatsOnSIGUSR1(ctx context.Context, mgr func() *attach.Manager, log *logrus.Entry) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				records := -1
				if m := mgr(); m != nil {
					recs, _ := m.Records()
					records = len(recs)
				}
				log.WithFields(logrus.Fields{
					"goroutines": runtime.NumGoroutine(), "heapAllocKiB": ms.HeapAlloc >> 10,
					"sysKiB": ms.Sys >> 10, "records": records,
				}).Info("stats")
			}
		}
	}()
}
