// Command pause is a minimal sandbox ("pause") process for CRI pods built
// offline by the test harness. It blocks until SIGTERM or SIGINT, then exits
// 0, and reaps any zombie children it inherits while running as PID 1.
//
// As a test pod's container, `pause --require-iface net1` first checks that
// the interface exists and exits 1 if it does not: a container that started
// before its pod's networks were attached shows up as a restart (fail-closed
// tests).
//
// `pause --probe tcp|udp ADDR:PORT` connects before doing anything else
// (its very first instruction), prints "probe: connected" or
// "probe: blocked: <error>", and exits 0 or 3: a container that reaches a
// peer its pod's policy denies proves the rule was missing when it started
// (MultiNetworkPolicy tests). A UDP probe sends one datagram and waits for
// the echo.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "--probe" {
		os.Exit(probe(os.Args[2], os.Args[3]))
	}
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

// probe dials addr once and reports; 0 connected, 3 blocked.
func probe(proto, addr string) int {
	c, err := net.DialTimeout(proto, addr, 3*time.Second)
	if err == nil && proto == "udp" {
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err = c.Write([]byte("probe")); err == nil {
			_, err = c.Read(make([]byte, 16))
		}
	}
	if err != nil {
		fmt.Printf("probe: blocked: %v\n", err)
		return 3
	}
	c.Close()
	fmt.Println("probe: connected")
	return 0
}
