package nft_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/netpol/ir"
	"github.com/nri-cni/nri-cni/nft"
)

// Replacing is one transaction: a reader never sees the table missing, and
// a blocked flow never passes, while the table is replaced 500 times.
func TestReplaceIsAtomic(t *testing.T) {
	pp := newPair(t)
	p := programmer(t)
	ruleset := func(i int) ir.Ruleset {
		port := uint16(8080 + i%2) // the content changes each time
		return ir.Ruleset{Digest: "r" + strconv.Itoa(i), Chains: []ir.Chain{chain("net1", ir.Ingress,
			ir.Rule{Protocol: ir.ProtoTCP, Ports: []ir.PortRange{{First: port, Last: port}}, Verdict: ir.Accept},
			ir.Rule{Addrs: pfx("10.200.0.0/16", "fd99::/64"), Verdict: ir.Accept})}}
	}

	// The blocked flow: UDP to 9090 in the pod, counted at the receiver.
	var got atomic.Int64
	var rx net.PacketConn
	require.NoError(t, pp.pod.Do(func(ns.NetNS) (err error) {
		rx, err = net.ListenPacket("udp", net.JoinHostPort(podV4, "9090"))
		return err
	}))
	received := make(chan struct{}, 1)
	rxDone := make(chan struct{})
	go func() {
		defer close(rxDone)
		buf := make([]byte, 16)
		for {
			k, _, err := rx.ReadFrom(buf)
			if err != nil {
				return
			}
			if string(buf[:k]) == "x" { // sent while a table is in place
				got.Add(1)
			}
			select {
			case received <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { _ = rx.Close(); <-rxDone })
	var tx net.Conn
	require.NoError(t, pp.peer.Do(func(ns.NetNS) (err error) {
		tx, err = net.Dial("udp", net.JoinHostPort(podV4, "9090"))
		return err
	}))
	defer tx.Close()
	// Without a table the flow passes: the probe can fail.
	passed := false
	for i := 0; i < 100 && !passed; i++ {
		_, err := tx.Write([]byte("sanity"))
		require.NoError(t, err)
		select {
		case <-received:
			passed = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.True(t, passed, "without a table the probe's datagrams never arrived")
	apply(t, p, pp.pod, ruleset(0))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var polls, missing, sent atomic.Int64
	var pollErr atomic.Value
	podNS := target(t, pp.pod)
	wg.Add(2)
	go func() { // the reader
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			d, err := p.Digest(context.Background(), podNS)
			if err != nil {
				pollErr.Store(err)
			} else if d == "" {
				missing.Add(1)
			}
			polls.Add(1)
		}
	}()
	go func() { // the blocked flow, probed in a loop (bounded)
		defer wg.Done()
		for i := 0; i < 1_000_000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := tx.Write([]byte("x")); err == nil {
				sent.Add(1)
			}
		}
	}()
	for i := 1; i <= 500; i++ {
		apply(t, p, pp.pod, ruleset(i))
	}
	close(stop)
	wg.Wait()
	assert.Equal(t, "r500", digest(t, p, pp.pod))
	assert.Nil(t, pollErr.Load(), "reading the marker while it is replaced")
	assert.Zero(t, missing.Load(), "the table was seen missing")
	assert.Positive(t, polls.Load())
	assert.Positive(t, sent.Load())
	assert.Zero(t, got.Load(), "a blocked datagram got through during a replacement (%d sent)", sent.Load())
	t.Logf("%d marker reads, %d blocked datagrams sent during 500 replacements", polls.Load(), sent.Load())
}

// Sets past 64 KiB of elements are chunked into several messages.
func TestLargeSetsProgramAndReadBack(t *testing.T) {
	n := newNS(t)
	p := programmer(t)
	const count = 20000
	var v4 []netip.Prefix
	var pairs []ir.AddrPort
	a := netip.MustParseAddr("10.100.0.0")
	b := netip.MustParseAddr("fd00::")
	for i := 0; i < count; i++ {
		v4 = append(v4, netip.PrefixFrom(a, 32)) // every other address: no two adjacent
		a = a.Next().Next()
		pairs = append(pairs, ir.AddrPort{Addr: b, Protocol: ir.ProtoTCP, Port: uint16(1 + i%1000)})
		b = b.Next()
	}
	rs := ir.Ruleset{Digest: "big", Chains: []ir.Chain{
		chain("net1", ir.Ingress, ir.Rule{Family: ir.IPv4, Addrs: v4, Verdict: ir.Accept}),
		chain("net1", ir.Egress, ir.Rule{AddrPorts: pairs, Verdict: ir.Accept}),
	}}
	apply(t, p, n, rs)
	assert.Equal(t, "big", digest(t, p, n))
	sets := setContents(t, n)
	require.Len(t, sets["ipv4_addr"], 2*count, "a start and an end per address")
	assert.Equal(t, "10.100.0.0", sets["ipv4_addr"][0])
	assert.Equal(t, "10.100.156.63 end", sets["ipv4_addr"][2*count-1])
	assert.Len(t, sets["ipv6_addr . inet_service"], count)
}

// The host's namespace is refused by every call, and its ruleset is
// byte-identical before and after (read with list calls only).
func TestRefusesTheHostNetns(t *testing.T) {
	requireRoot(t)
	p := programmer(t)
	before := hostRuleset(t)
	ctx := context.Background()
	for _, path := range []string{"/proc/self/ns/net", "/proc/1/ns/net"} {
		id, err := netns.Identify(path)
		if path != "/proc/self/ns/net" && err != nil {
			t.Logf("%s not readable here (%v): the Resolver counts it only when readable", path, err)
			continue
		}
		require.NoError(t, err)
		host := netns.Netns{Path: path, ID: id}
		err = p.Apply(ctx, host, everyKind("host"))
		require.ErrorIs(t, err, netns.ErrHostNetns)
		assert.Contains(t, err.Error(), path)
		require.ErrorIs(t, p.Apply(ctx, host, ir.Ruleset{}), netns.ErrHostNetns)
		require.ErrorIs(t, p.Delete(ctx, host), netns.ErrHostNetns)
		_, err = p.Digest(ctx, host)
		require.ErrorIs(t, err, netns.ErrHostNetns)
	}
	assert.Equal(t, before, hostRuleset(t), "the host's nf_tables ruleset changed")
	assert.NotContains(t, before, "table inet "+nft.TableName)
}

// hostRuleset lists the host's tables, chains, rules and sets through
// netlink dumps (no write, no nft command), rendered as text.
func hostRuleset(t *testing.T) string {
	t.Helper()
	c, err := nftables.New()
	require.NoError(t, err)
	tables, err := c.ListTables()
	require.NoError(t, err)
	out := ""
	for _, tb := range tables {
		out += fmt.Sprintf("table %v %s flags %d\n", tb.Family, tb.Name, tb.Flags)
		sets, err := c.GetSets(tb)
		require.NoError(t, err)
		for _, s := range sets {
			elems, err := c.GetSetElements(s)
			require.NoError(t, err)
			out += fmt.Sprintf("  set %s %s %+v\n", s.Name, s.KeyType.Name, elems)
		}
	}
	chains, err := c.ListChains()
	require.NoError(t, err)
	for _, ch := range chains {
		out += fmt.Sprintf("chain %v %s %s\n", ch.Table.Family, ch.Table.Name, ch.Name)
		rs, err := c.GetRules(ch.Table, ch)
		require.NoError(t, err)
		for _, r := range rs {
			out += fmt.Sprintf("  rule %d %x", r.Handle, r.UserData)
			for _, e := range r.Exprs {
				out += fmt.Sprintf(" %#v", e)
			}
			out += "\n"
		}
	}
	return out
}

// ENOBUFS on Flush: the replies were lost, maybe not the batch. The marker
// decides; one retry, then an error.
func TestENOBUFSReadsTheMarkerBack(t *testing.T) {
	n := newNS(t)
	ctx := context.Background()
	rs := everyKind("enobufs")
	for _, c := range []struct {
		name    string
		flush   func(call int, c *nftables.Conn) error
		calls   int
		wantErr bool
	}{
		{"batch applied, replies lost", func(_ int, c *nftables.Conn) error {
			if err := c.Flush(); err != nil {
				return err
			}
			return syscall.ENOBUFS
		}, 1, false},
		{"batch lost once, then applied", func(call int, c *nftables.Conn) error {
			if call == 1 {
				return syscall.ENOBUFS
			}
			return c.Flush()
		}, 2, false},
		{"batch lost twice", func(int, *nftables.Conn) error { return syscall.ENOBUFS }, 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, programmer(t).Delete(ctx, target(t, n)))
			calls := 0
			p, err := nft.New(nft.WithFlush(func(conn *nftables.Conn) error { calls++; return c.flush(calls, conn) }))
			require.NoError(t, err)
			err = p.Apply(ctx, target(t, n), rs)
			assert.Equal(t, c.calls, calls)
			if c.wantErr {
				require.ErrorIs(t, err, syscall.ENOBUFS)
				assert.Equal(t, "", digest(t, p, n))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "enobufs", digest(t, p, n))
		})
	}
}

// The check is the Resolver's notion of the host: a namespace it counts as
// the host's is refused and never written (shown safely on a test netns).
func TestRefusesWhatTheResolverCallsTheHost(t *testing.T) {
	n := newNS(t)
	tgt := target(t, n)
	r, err := netns.NewResolver(netns.WithHost(tgt.ID))
	require.NoError(t, err)
	p, err := nft.New(nft.WithResolver(r))
	require.NoError(t, err)
	require.ErrorIs(t, p.Apply(context.Background(), tgt, everyKind("x")), netns.ErrHostNetns)
	assert.Equal(t, "", digest(t, programmer(t), n), "nothing written")
}
