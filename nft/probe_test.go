package nft_test

// Real traffic between test namespaces: listeners and dialers made with Go
// inside ns.Do (the socket lives in the namespace it was made in), probes
// that say whether a flow gets through.

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// probeWait is how long a probe waits for an answer before it calls the
// flow blocked. Not a timing assertion: a flow that passes answers in
// microseconds over a veth; a dropped one never does.
const probeWait = 400 * time.Millisecond

// serve listens on TCP and UDP at addr:port in n: TCP connections get
// "ok", UDP datagrams are echoed. Closed when tb ends.
func serve(tb testing.TB, n ns.NetNS, addr string, port int) {
	tb.Helper()
	hostport := net.JoinHostPort(addr, strconv.Itoa(port))
	var l net.Listener
	var pc net.PacketConn
	require.NoError(tb, n.Do(func(ns.NetNS) error {
		var err error
		if l, err = net.Listen("tcp", hostport); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", hostport)
		return err
	}))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ok"))
			_ = c.Close()
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:k], from)
		}
	}()
	tb.Cleanup(func() { _ = l.Close(); _ = pc.Close(); wg.Wait() })
}

// reaches says whether a proto ("tcp", "udp") flow from src (in n) to
// dst:port gets an answer.
func reaches(tb testing.TB, n ns.NetNS, proto, src, dst string, port int) bool {
	tb.Helper()
	var ok bool
	require.NoError(tb, n.Do(func(ns.NetNS) error {
		var local net.Addr
		if proto == "tcp" {
			local = &net.TCPAddr{IP: net.ParseIP(src)}
		} else {
			local = &net.UDPAddr{IP: net.ParseIP(src)}
		}
		d := net.Dialer{LocalAddr: local, Timeout: probeWait}
		c, err := d.Dial(proto, net.JoinHostPort(dst, strconv.Itoa(port)))
		if err != nil {
			return nil // no answer to the SYN: blocked
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(probeWait))
		if proto == "udp" {
			if _, err := c.Write([]byte("hi")); err != nil {
				return nil
			}
		}
		buf := make([]byte, 8)
		k, err := c.Read(buf)
		ok = err == nil && k > 0
		return nil
	}))
	return ok
}

// errNoSCTP: the kernel has no SCTP (CONFIG_IP_SCTP unset or module absent).
var errNoSCTP = errors.New("the kernel has no SCTP")

// sctpListen listens on SCTP (one-to-one style) at addr:port in n, accepting
// and closing; Go's net has no SCTP, so raw sockets.
func sctpListen(tb testing.TB, n ns.NetNS, addr string, port int) error {
	tb.Helper()
	var fd int
	err := n.Do(func(ns.NetNS) error {
		var err error
		fd, err = sctpSocket(addr)
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, sockaddr(addr, port)); err != nil {
			_ = unix.Close(fd)
			return err
		}
		return unix.Listen(fd, 16)
	})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, _, err := unix.Accept(fd)
			if err != nil {
				return
			}
			_ = unix.Close(c)
		}
	}()
	tb.Cleanup(func() { _ = unix.Shutdown(fd, unix.SHUT_RDWR); _ = unix.Close(fd); <-done })
	return nil
}

// sctpReaches says whether an SCTP association from src to dst:port is
// set up (INIT answered).
func sctpReaches(tb testing.TB, n ns.NetNS, src, dst string, port int) bool {
	tb.Helper()
	var ok bool
	require.NoError(tb, n.Do(func(ns.NetNS) error {
		fd, err := sctpSocket(dst)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, sockaddr(src, 0)); err != nil {
			return err
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			return err
		}
		if err := unix.Connect(fd, sockaddr(dst, port)); err != nil && !errors.Is(err, unix.EINPROGRESS) {
			return nil
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if k, err := unix.Poll(pfd, int(probeWait/time.Millisecond)); err != nil || k == 0 {
			return nil
		}
		soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		ok = err == nil && soerr == 0
		return nil
	}))
	return ok
}

func sctpSocket(addr string) (int, error) {
	family := unix.AF_INET
	if netip.MustParseAddr(addr).Is6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.ESOCKTNOSUPPORT) {
		return -1, errNoSCTP
	}
	return fd, err
}

func sockaddr(addr string, port int) unix.Sockaddr {
	a := netip.MustParseAddr(addr)
	if a.Is4() {
		return &unix.SockaddrInet4{Port: port, Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: port, Addr: a.As16()}
}
