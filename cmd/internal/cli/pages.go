package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// startupSettles is how long after start the start-up pages are released:
// the runtime's first synchronisation, the informers' first lists and the
// DRA driver's first publish are over by then.
const startupSettles = 30 * time.Second

// releaseAfterStart releases the start-up pages once, startupSettles after
// start (unless ctx ends first), and logs what it gave back.
func releaseAfterStart(ctx context.Context, log *logrus.Entry) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(startupSettles):
	}
	before, after, err := releaseStartupPages()
	l := log.WithFields(logrus.Fields{"rssKiB": before, "rssAfterKiB": after})
	if err != nil {
		l.WithError(err).Debug("start-up pages of the binary not released")
		return
	}
	l.Info("released the binary's start-up pages")
}

// Start-up code and data (client-go's scheme registers every API group at
// init; the first list of every informer) are read once and never again,
// yet their pages of the binary stay mapped: nri-cni-k8s's resident set is
// two thirds its own binary's file pages (27.6 of 40 MiB at the peak of a
// pod storm, make bench section density). releaseStartupPages asks the
// kernel to reclaim the clean, read-only pages of the binary's mappings
// (MADV_PAGEOUT, Linux 5.4+): what the daemon still runs faults back in
// from the file; the rest stops counting against the node and the pod's
// memory. Called once, after start-up.
//
// It returns the resident KiB before and after; an error means nothing was
// released (an older kernel: EINVAL).
func releaseStartupPages() (before, after int, err error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, 0, fmt.Errorf("own binary: %w", err)
	}
	before = residentKiB()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return before, before, fmt.Errorf("own mappings: %w", err)
	}
	defer f.Close()
	var firstErr error
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			continue
		}
		// The binary's own mapping, read-only: no Go-managed memory, so
		// the raw syscall on its address range is safe.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT); errno != 0 && firstErr == nil {
			firstErr = fmt.Errorf("madvise(MADV_PAGEOUT) %s: %w", fields[0], errno)
		}
	}
	if err := sc.Err(); err != nil && firstErr == nil {
		firstErr = err
	}
	return before, residentKiB(), firstErr
}

// residentKiB is this process's VmRSS.
func residentKiB() int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
