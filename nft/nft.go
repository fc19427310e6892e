// Package nft programs a ir.Ruleset into a pod's network namespace as
// one nftables table, `inet nri-cni`, over netlink (google/nftables; no
// `nft` binary). It is the only importer of google/nftables.
//
// Its rules:
//   - never the host's namespace: every call opens the path, checks that it
//     is the namespace the caller resolved (netns.Netns.ID) and not the
//     host's, and only then opens a netlink socket inside it (by fd);
//   - replace in one transaction: add, delete, add the table, then its
//     chains, sets and rules, in one batch: packets see the old table or the
//     new one, never none;
//   - the table outlives nri-cni (no NFT_TABLE_F_OWNER), and the first rule
//     of its input chain carries "nri-cni v1 <digest>", which Digest reads.
//
// A Programmer is safe for concurrent use on different namespaces; calls on
// one namespace are serialised by the caller (the sandbox lock).
package nft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/netpol/ir"
)

// ErrNoMarker: the table exists but its input chain carries no marker of
// ours (someone changed it): treat as drift and reprogram.
var ErrNoMarker = errors.New("table inet " + TableName + " has no nri-cni marker")

// sockBuf is the netlink socket's send and receive buffer: the batch goes
// in one sendmsg (refused past the send buffer), and v0.3.0 asks an ACK
// (and, for rules, an echo) of every message, all queued before the first
// read. At the renderer's caps a batch is about 1 MB.
const sockBuf = 8 << 20

// Programmer writes pods' tables.
type Programmer struct {
	resolver *netns.Resolver
	// flush sends a batch (tests inject failures).
	flush func(*nftables.Conn) error
	// unmerged: the kernel refused a set of concatenated ranges (Linux
	// before 5.6: EOPNOTSUPP); every later batch has one rule per rule.
	unmerged atomic.Bool
}

// Option configures a Programmer.
type Option func(*Programmer)

// WithResolver sets the resolver whose host namespaces are refused (by
// default a new netns.Resolver: this process's namespace and PID 1's).
func WithResolver(r *netns.Resolver) Option { return func(p *Programmer) { p.resolver = r } }

// withFlush replaces Conn.Flush (tests).
func withFlush(f func(*nftables.Conn) error) Option { return func(p *Programmer) { p.flush = f } }

// New records the host's network namespace(s), which every call refuses.
func New(opts ...Option) (*Programmer, error) {
	p := &Programmer{flush: (*nftables.Conn).Flush}
	for _, o := range opts {
		o(p)
	}
	if p.resolver == nil {
		r, err := netns.NewResolver()
		if err != nil {
			return nil, err
		}
		p.resolver = r
	}
	return p, nil
}

func table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
}

// open opens ns.Path and verifies it: a network namespace, the one the
// caller resolved, not the host's. The fd is what the socket is made in, so
// the namespace checked is the namespace written.
func (p *Programmer) open(ns netns.Netns) (*os.File, error) {
	f, err := os.Open(ns.Path)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", ns.Path, err)
	}
	fdPath := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	got, err := p.resolver.Check(fdPath)
	if err == nil && got.ID != ns.ID {
		err = fmt.Errorf("%w: %s is %v, resolved as %v", netns.ErrMismatch, ns.Path, got.ID, ns.ID)
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, netns.ErrHostNetns) {
			return nil, fmt.Errorf("netns %s: %w: refusing to program nftables there", ns.Path, netns.ErrHostNetns)
		}
		return nil, fmt.Errorf("netns %s: %w", ns.Path, err)
	}
	return f, nil
}

// conn is a lasting netlink socket inside the namespace of f.
func conn(f *os.File) (*nftables.Conn, error) {
	return nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(int(f.Fd())),
		nftables.WithSockOptions(raiseBufs))
}

// raiseBufs forces both buffers past wmem_max / rmem_max (CAP_NET_ADMIN,
// which nri-cni has), falling back to what the limits allow.
func raiseBufs(c *netlink.Conn) error {
	raw, err := c.SyscallConn()
	if err == nil {
		var rerr, werr error
		err = raw.Control(func(fd uintptr) {
			rerr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBuf)
			werr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBuf)
		})
		if err == nil && rerr == nil && werr == nil {
			return nil
		}
	}
	if err := c.SetReadBuffer(sockBuf); err != nil {
		return err
	}
	return c.SetWriteBuffer(sockBuf)
}

// withConn runs fn with a socket in the verified namespace; every error
// names the path, and fn's also what was being done (op).
func (p *Programmer) withConn(ctx context.Context, ns netns.Netns, op string, fn func(*nftables.Conn) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("netns %s: %s table inet %s: %w", ns.Path, op, TableName, err)
	}
	f, err := p.open(ns)
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := conn(f)
	if err != nil {
		return fmt.Errorf("netns %s: netlink: %w", ns.Path, err)
	}
	defer func() { _ = c.CloseLasting() }()
	if err := fn(c); err != nil {
		return fmt.Errorf("netns %s: %s table inet %s: %w", ns.Path, op, TableName, err)
	}
	return nil
}

// Apply makes the namespace's table what rs says, in one transaction. An
// empty Ruleset deletes the table if there is one, and writes nothing
// otherwise.
func (p *Programmer) Apply(ctx context.Context, ns netns.Netns, rs ir.Ruleset) error {
	if rs.Empty() {
		return p.Delete(ctx, ns)
	}
	prog, err := build(table(), rs, !p.unmerged.Load())
	if err != nil {
		return fmt.Errorf("netns %s: %w", ns.Path, err)
	}
	for try := 0; ; try++ {
		err := p.withConn(ctx, ns, "programming", func(c *nftables.Conn) error {
			old, err := current(c)
			if err != nil {
				return err
			}
			if err := prog.write(c, old); err != nil {
				return err
			}
			return p.flush(c)
		})
		if err == nil {
			return nil
		}
		if errors.Is(err, unix.EOPNOTSUPP) && prog.merged && !p.unmerged.Swap(true) {
			// Nothing of a refused batch was committed: the same
			// rules again, one nft rule each, on this and every batch.
			if prog, err = build(table(), rs, false); err != nil {
				return fmt.Errorf("netns %s: %w", ns.Path, err)
			}
			try--
			continue
		}
		if !errors.Is(err, syscall.ENOBUFS) {
			return err
		}
		// Replies were lost, not necessarily the batch: ask the kernel.
		if got, derr := p.Digest(ctx, ns); derr == nil && got == rs.Digest {
			return nil
		}
		if try == 1 {
			return fmt.Errorf("%w (twice; the marker does not show the new digest)", err)
		}
	}
}

// programmed is what the table holds before a replacement: its regular
// chains and its sets (nil: no table).
type programmed struct {
	chains []*nftables.Chain
	sets   []*nftables.Set
}

// current lists the table's regular chains and sets (two dumps; nil
// without a table).
func current(c *nftables.Conn) (*programmed, error) {
	ok, err := exists(c)
	if err != nil || !ok {
		return nil, err
	}
	t := table()
	chains, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return nil, err
	}
	old := &programmed{}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == t.Name && ch.Hooknum == nil {
			old.chains = append(old.chains, ch)
		}
	}
	if old.sets, err = c.GetSets(t); err != nil {
		return nil, err
	}
	return old, nil
}

// write buffers the whole replacement into c. An existing table is kept
// with its base chains (input, output): their rules are flushed, the
// regular chains and sets deleted and everything added again, in the same
// transaction. Deleting the table instead would register the new base
// chains' hooks beside the old ones while the batch is prepared, and a
// packet between the two when the generation flips would pass both as
// empty (seen: one datagram of 48,876 in TestReplaceIsAtomic).
func (prog *program) write(c *nftables.Conn, old *programmed) error {
	t := prog.table
	c.AddTable(t) // creates it if absent (a no-op otherwise)
	if old != nil {
		c.FlushTable(t) // every rule: no jump holds a chain below
		for _, ch := range old.chains {
			ch.Table = t
			c.DelChain(ch)
		}
		for _, s := range old.sets {
			s.Table = t
			c.DelSet(s)
		}
	}
	for _, ch := range prog.chains {
		c.AddChain(ch)
	}
	for _, s := range prog.sets {
		if err := c.AddSet(s.set, nil); err != nil {
			return fmt.Errorf("set %s: %w", s.set.Name, err)
		}
		for _, chunk := range chunks(s.elems) {
			if err := c.SetAddElements(s.set, chunk); err != nil {
				return fmt.Errorf("set %s: %w", s.set.Name, err)
			}
		}
	}
	byName := map[string]*nftables.Chain{}
	for _, ch := range prog.chains {
		byName[ch.Name] = ch
	}
	for _, r := range prog.rules {
		c.AddRule(&nftables.Rule{Table: t, Chain: byName[r.chain], Exprs: r.exprs, UserData: r.userdata})
	}
	return nil
}

// exists says whether the namespace has our table (one dump of inet tables).
func exists(c *nftables.Conn) (bool, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, err
	}
	for _, t := range tables {
		if t.Name == TableName {
			return true, nil
		}
	}
	return false, nil
}

// Digest reads the marker: the digest the table was programmed with, ""
// when there is no table, ErrNoMarker when the table has none.
func (p *Programmer) Digest(ctx context.Context, ns netns.Netns) (string, error) {
	var digest string
	err := p.withConn(ctx, ns, "reading", func(c *nftables.Conn) error {
		// A netlink dump is no snapshot: one that races a replacement can
		// miss the marker (seen in TestReplaceIsAtomic). A table really
		// without one stays so: a few reads tell the two apart.
		var err error
		for try := 0; try < markerReads; try++ {
			if digest, err = marker(c); !errors.Is(err, ErrNoMarker) {
				return err
			}
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return digest, nil
}

// markerReads is how many dumps Digest makes before it calls a table
// without a marker drift.
const markerReads = 5

// marker is one read of the marker: "" with no table.
func marker(c *nftables.Conn) (string, error) {
	ok, err := exists(c)
	if err != nil || !ok {
		return "", err
	}
	rules, err := c.GetRules(table(), &nftables.Chain{Name: "input"})
	if err != nil {
		return "", err
	}
	if len(rules) > 0 {
		if s, ok := userdata.GetString(rules[0].UserData, userdata.TypeComment); ok {
			if d, ok := strings.CutPrefix(s, markerPrefix); ok && d != "" {
				return d, nil
			}
		}
	}
	return "", ErrNoMarker
}

// Delete removes the table if the namespace has it; with none it writes
// nothing.
func (p *Programmer) Delete(ctx context.Context, ns netns.Netns) error {
	return p.withConn(ctx, ns, "deleting", func(c *nftables.Conn) error {
		ok, err := exists(c)
		if err != nil || !ok {
			return err
		}
		t := table()
		c.AddTable(t) // gone in between: the delete still succeeds
		c.DelTable(t)
		return p.flush(c)
	})
}
