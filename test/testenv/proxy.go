package testenv

import (
	"io"
	"net"
	"os"
	"sync"
	"testing"
)

// UnixProxy forwards connections from one unix socket to another and can
// drop them all at once: what a runtime restart does to its NRI plugins'
// connections, which an in-process runtime side cannot do on Stop.
type UnixProxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
}

// NewUnixProxy listens on listen and forwards to target; closed at cleanup.
func NewUnixProxy(t testing.TB, listen, target string) *UnixProxy {
	t.Helper()
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		t.Fatal(err)
	}
	p := &UnixProxy{l: l, target: target}
	go p.serve()
	t.Cleanup(func() { l.Close(); p.DropAll() })
	return p
}

func (p *UnixProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("unix", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close(); c.Close() }()
		go func() { _, _ = io.Copy(c, u); u.Close(); c.Close() }()
	}
}

// DropAll closes every proxied connection, both ends.
func (p *UnixProxy) DropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
