// Command pause is a minimal sandbox ("pause") process for CRI pods built
// offline by the test harness. It blocks until SIGTERM or SIGINT, then exits
// 0, and reaps any zombie children it inherits while running as PID 1.
//
// As a test pod's container, `pause --require-iface net1` first checks that
// the interface exists and exits 1 if it does not: a container that started
// before its pod's networks were attached shows up as a restart (fail-closed
// tests).
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "--require-iface" {
		if _, err := net.InterfaceByName(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "pause: started without %s: %v\n", os.Args[2], err)
			os.Exit(1)
		}
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGCHLD)
	// Signals that would otherwise terminate the process are ignored; as
	// PID 1 the kernel already drops unhandled ones, but be explicit.
	signal.Ignore(unix.SIGHUP, unix.SIGQUIT, unix.SIGPIPE, unix.SIGUSR1,
		unix.SIGUSR2, unix.SIGALRM, unix.SIGTTIN, unix.SIGTTOU)

	for sig := range sigs {
		switch sig {
		case unix.SIGTERM, unix.SIGINT:
			os.Exit(0)
		case unix.SIGCHLD:
			reap()
		}
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
