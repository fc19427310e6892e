package netpol_test

// The reachability harness: a world of pods on secondary networks, each
// pod's Ruleset rendered from the world's snapshot, and probes judged by
// netpol/eval on both ends (the client's egress chain, then the server's
// ingress chain), as a connection crosses both pods' tables.

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/eval"
	"github.com/nri-cni/nri-cni/netpol/netpoltest"
)

// pod is a pod of a test world.
type pod struct {
	ns, name string
	labels   map[string]string
	ifaces   []iface
	ports    []netpol.NamedPort
}

type iface struct {
	name string
	id   netpol.Identity
	ips  []netip.Addr
}

// mk is a pod with one interface net1 on the NAD nad, its addresses and
// labels given as "k=v".
func mk(ns, name, nad, addrs string, labels ...string) *pod {
	l := map[string]string{}
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		l[k] = v
	}
	return &pod{ns: ns, name: name, labels: l,
		ifaces: []iface{{name: "net1", id: netpol.Identity{NAD: nad}, ips: netpoltest.Addrs(strings.Fields(addrs)...)}}}
}

func (p *pod) key() string { return p.ns + "/" + p.name }

func (p *pod) target() netpol.Target {
	t := netpol.Target{Namespace: p.ns, Name: p.name, UID: p.key(), Labels: p.labels, NamedPorts: p.ports}
	for _, i := range p.ifaces {
		t.Interfaces = append(t.Interfaces, netpol.Interface{IfName: i.name, Identity: i.id, IPs: i.ips})
	}
	return t
}

func (p *pod) peer() *netpol.Peer {
	pr := &netpol.Peer{Namespace: p.ns, Name: p.name, UID: p.key(), Labels: p.labels, NamedPorts: p.ports,
		Addrs: map[netpol.Identity][]netip.Addr{}}
	for _, i := range p.ifaces {
		pr.Addrs[i.id] = append(pr.Addrs[i.id], i.ips...)
	}
	return pr
}

// world is pods, namespaces and policies in one snapshot.
type world struct {
	t        testing.TB
	snap     *netpoltest.Snapshot
	pods     map[string]*pod
	order    []string
	opts     netpol.Options
	memo     *netpol.Memo
	rendered map[string]netpol.Ruleset
	notes    map[string][]netpol.Note
	version  uint64
	optsSeen string
}

// newWorld makes the namespaces (name → "k=v" labels) and the pods.
func newWorld(t testing.TB, namespaces map[string][]string, pods ...*pod) *world {
	w := &world{t: t, snap: netpoltest.New(), pods: map[string]*pod{}, memo: netpol.NewMemo()}
	for ns, kvs := range namespaces {
		l := map[string]string{}
		for _, kv := range kvs {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = v
		}
		w.snap.AddNamespace(ns, l)
	}
	for _, p := range pods {
		w.addPod(p)
	}
	return w
}

func (w *world) addPod(p *pod) {
	if _, ok := w.pods[p.key()]; !ok {
		w.order = append(w.order, p.key())
	}
	w.pods[p.key()] = p
	w.snap.AddPeer(p.peer())
}

func (w *world) add(ps ...*netpol.Policy) *world {
	for _, p := range ps {
		w.snap.AddPolicy(p)
	}
	return w
}

func (w *world) pod(key string) *pod {
	p, ok := w.pods[key]
	if !ok {
		w.t.Fatalf("no pod %s in the world", key)
	}
	return p
}

// rules renders a pod's Ruleset (once per snapshot version).
func (w *world) rules(key string) netpol.Ruleset {
	if v, o := w.snap.Version(), fmt.Sprint(w.opts); v != w.version || o != w.optsSeen {
		w.version, w.optsSeen, w.rendered, w.notes = v, o, map[string]netpol.Ruleset{}, map[string][]netpol.Note{}
	}
	if rs, ok := w.rendered[key]; ok {
		return rs
	}
	rs, notes := netpol.Render(w.pod(key).target(), w.snap, w.opts, w.memo)
	w.rendered[key], w.notes[key] = rs, notes
	return rs
}

// conn says whether a connection from one pod to another passes both
// tables, over the network named (or the first network they share), to the
// server's first address of a family the client has. When it passes, its
// replies must pass too.
func (w *world) conn(from, to, network string, proto netpol.Protocol, port uint16) bool {
	w.t.Helper()
	c, s := w.pod(from), w.pod(to)
	for _, si := range s.ifaces {
		if network != "" && si.id.String() != network {
			continue
		}
		for _, ci := range c.ifaces {
			if ci.id != si.id {
				continue
			}
			for _, sa := range si.ips {
				for _, ca := range ci.ips {
					if sa.Is4() != ca.Is4() {
						continue
					}
					out := eval.Packet{IfName: ci.name, Direction: netpol.Egress, Peer: sa, Protocol: proto, Port: port}
					in := eval.Packet{IfName: si.name, Direction: netpol.Ingress, Peer: ca, Protocol: proto, Port: port}
					ok := eval.Judge(w.rules(from), out) == netpol.Accept && eval.Judge(w.rules(to), in) == netpol.Accept
					if ok {
						back := eval.Packet{IfName: si.name, Direction: netpol.Egress, Peer: ca, Protocol: proto, Established: true}
						fwd := eval.Packet{IfName: ci.name, Direction: netpol.Ingress, Peer: sa, Protocol: proto, Established: true}
						if eval.Judge(w.rules(to), back) != netpol.Accept || eval.Judge(w.rules(from), fwd) != netpol.Accept {
							w.t.Errorf("%s→%s passes but its replies do not", from, to)
						}
					}
					return ok
				}
			}
		}
	}
	w.t.Fatalf("%s and %s share no network %q of one family", from, to, network)
	return false
}

var protos = map[string]netpol.Protocol{"tcp": netpol.ProtoTCP, "udp": netpol.ProtoUDP, "sctp": netpol.ProtoSCTP}

// probe checks "from>to[:port[/proto]][@network] ok|ko" (port 80, tcp by
// default); names without "/" are in namespace ns.
func (w *world) probe(ns string, probes ...string) {
	w.t.Helper()
	for _, pr := range probes {
		f := strings.Fields(pr)
		if len(f) != 2 || (f[1] != "ok" && f[1] != "ko") {
			w.t.Fatalf("probe %q: want \"from>to[:port[/proto]][@network] ok|ko\"", pr)
		}
		spec, network, _ := strings.Cut(f[0], "@")
		from, to, _ := strings.Cut(spec, ">")
		to, portProto, _ := strings.Cut(to, ":")
		port, proto := uint16(80), netpol.ProtoTCP
		if portProto != "" {
			ps, pp, _ := strings.Cut(portProto, "/")
			n, err := strconv.Atoi(ps)
			if err != nil {
				w.t.Fatalf("probe %q: port: %v", pr, err)
			}
			port = uint16(n)
			if pp != "" {
				proto = protos[pp]
			}
		}
		if !strings.Contains(from, "/") {
			from = ns + "/" + from
		}
		if !strings.Contains(to, "/") {
			to = ns + "/" + to
		}
		if got := w.conn(from, to, network, proto, port); got != (f[1] == "ok") {
			w.t.Errorf("%s: got %v\n%s ingress/egress:\n%s\n%s:\n%s", pr, map[bool]string{true: "ok", false: "ko"}[got],
				from, w.rules(from), to, w.rules(to))
		}
	}
}

// matrix is the reachability of every ordered pair of the world's pods
// ("-" for a pod to itself, "." reachable, "X" not), one row per client in
// the order the pods were added.
func (w *world) matrix(proto netpol.Protocol, port uint16) string {
	var b strings.Builder
	for _, from := range w.order {
		for _, to := range w.order {
			switch {
			case from == to:
				b.WriteByte('-')
			case w.conn(from, to, "", proto, port):
				b.WriteByte('.')
			default:
				b.WriteByte('X')
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// expectMatrix compares with a grid (spaces ignored, one row per line).
func (w *world) expectMatrix(what string, proto netpol.Protocol, port uint16, grid string) {
	w.t.Helper()
	var want strings.Builder
	for _, line := range strings.Split(grid, "\n") {
		if line = strings.ReplaceAll(strings.TrimSpace(line), " ", ""); line != "" {
			want.WriteString(line + "\n")
		}
	}
	if got := w.matrix(proto, port); got != want.String() {
		w.t.Errorf("%s, %s/%d: reachability (rows: clients %v)\ngot:\n%swant:\n%s", what, proto, port, w.order, got, want.String())
	}
}

// isolated says which pods got a table.
func (w *world) expectTables(keys ...string) {
	w.t.Helper()
	var got []string
	for _, k := range w.order {
		if !w.rules(k).Empty() {
			got = append(got, k)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(keys) {
		w.t.Errorf("pods with a table: got %v, want %v", got, keys)
	}
}
