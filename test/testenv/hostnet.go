package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Helpers for tests whose CNI plugins reach the host the way the bridge
// plugin's ipMasq, portmap and the dhcp IPAM do: a DHCP server on a bridge,
// the dhcp plugin's daemon, and putting back the host's iptables chains and
// ip_forward the plugins create or set. Everything a helper creates has a
// unique name and is removed at the test's cleanup, also on failure.

// DHCPServer is busybox's udhcpd in a network namespace of its own whose
// eth0 is a port of a bridge in the host's namespace: pods on that bridge
// get addresses from First to Last.
type DHCPServer struct {
	Bridge      string
	Subnet      *net.IPNet
	ServerIP    net.IP
	First, Last net.IP
	Log         string // udhcpd's output
}

// StartDHCPServer starts udhcpd serving subnet (a /24, unique to the test)
// on bridge (a unique name), which it creates if it does not exist (and then
// deletes at cleanup). It offers no router option: a pod's other default
// route stays its only one.
func StartDHCPServer(t testing.TB, bridge, subnet string) *DHCPServer {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("the DHCP server is busybox's udhcpd: install Debian's busybox-static (test/tools/install.sh apt): %v", err)
	}
	_, sn, err := net.ParseCIDR(subnet)
	if err != nil || sn.IP.To4() == nil {
		t.Fatalf("DHCP subnet %q: want an IPv4 /24 (%v)", subnet, err)
	}
	ip := func(last byte) net.IP { v := append(net.IP(nil), sn.IP.To4()...); v[3] = last; return v }
	s := &DHCPServer{Bridge: bridge, Subnet: sn, ServerIP: ip(1), First: ip(100), Last: ip(199)}

	if _, err := netlink.LinkByName(bridge); err != nil {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridge}}
		if err := netlink.LinkAdd(br); err != nil {
			t.Fatalf("creating bridge %s: %v", bridge, err)
		}
		t.Cleanup(func() { DeleteLink(bridge) })
	}
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	n := NewNetNS(t)
	hostEnd := UniqueName("dhs")
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostEnd, MasterIndex: br.Attrs().Index}, PeerName: UniqueName("dhp"),
		PeerNamespace: netlink.NsFd(int(n.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("creating the DHCP server's veth: %v", err)
	}
	t.Cleanup(func() { DeleteLink(hostEnd) }) // takes its peer with it
	if err := netlink.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	inNS := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("nsenter", append([]string{"--net=" + n.Path(), "ip"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v in the DHCP server's netns: %v: %s", args, err, out)
		}
	}
	inNS("link", "set", veth.PeerName, "name", "eth0")
	inNS("addr", "add", s.ServerIP.String()+"/24", "dev", "eth0")
	inNS("link", "set", "eth0", "up")
	inNS("link", "set", "lo", "up")

	dir := t.TempDir()
	conf := filepath.Join(dir, "udhcpd.conf")
	lease := filepath.Join(dir, "udhcpd.leases")
	if err := os.WriteFile(lease, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("interface eth0\nstart %s\nend %s\nlease_file %s\npidfile %s\n"+
		"option subnet 255.255.255.0\noption lease 600\n", s.First, s.Last, lease, filepath.Join(dir, "udhcpd.pid"))), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Log = filepath.Join(dir, "udhcpd.log")
	startLogged(t, "udhcpd", s.Log, "nsenter", "--net="+n.Path(), busybox, "udhcpd", "-f", conf)
	// udhcpd binds its socket at once; a moment for it to start.
	waitFor(t, 5*time.Second, "udhcpd to listen on 67/udp", func() bool {
		out, err := exec.Command("nsenter", "--net="+n.Path(), "cat", "/proc/net/udp").Output()
		return err == nil && strings.Contains(string(out), ":0043 ")
	})
	return s
}

// DeleteLink deletes the host's interface name if it exists (one the test
// created).
func DeleteLink(name string) {
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
}

// Contains reports whether ip is one the server hands out.
func (s *DHCPServer) Contains(ip net.IP) bool {
	v := ip.To4()
	return v != nil && s.Subnet.Contains(v) && v[3] >= s.First[3] && v[3] <= s.Last[3]
}

// StartDHCPDaemon runs the dhcp plugin's daemon (`dhcp daemon -socketpath
// socket`, the binary of cniDir) in the host's namespaces, as a node runs
// it, until the test ends. It returns its log's path. Each DHCP attempt
// waits 2 s (-timeout; the default 10 s): the first DISCOVER, sent the
// moment the pod's new interface comes up, is often lost, and the local
// server answers the next in milliseconds.
func StartDHCPDaemon(t testing.TB, cniDir, socket string) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "dhcp-daemon.log")
	startLogged(t, "the dhcp daemon", log, filepath.Join(cniDir, "dhcp"), "daemon", "-socketpath", socket, "-timeout", "2s")
	waitFor(t, 10*time.Second, "the dhcp daemon's socket "+socket, func() bool { return Exists(socket) })
	t.Cleanup(func() { _ = os.Remove(socket) })
	return log
}

// startLogged starts argv with its output in log; the cleanup kills it by
// pid and shows the log if the test failed.
func startLogged(t testing.TB, what, log string, argv ...string) {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("starting %s: %v", what, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		f.Close()
		if t.Failed() {
			data, _ := os.ReadFile(log)
			t.Logf("%s's output:\n%s", what, data)
		}
	})
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, cond)
}

// ServeTCP listens on port inside the network namespace at nsPath (a
// pod's) and answers every connection with greeting, until the test ends.
func ServeTCP(t testing.TB, nsPath string, port int, greeting string) {
	t.Helper()
	var l net.Listener
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port)) // the socket stays in that netns
		return err
	})
	if err != nil {
		t.Fatalf("listening on %d in %s: %v", port, nsPath, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(greeting + "\n"))
			c.Close()
		}
	}()
}

// ReadGreeting connects to addr (host:port) from the test's namespace and
// returns the first line it is sent.
func ReadGreeting(addr string) (string, error) {
	c, err := net.DialTimeout("tcp4", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// RestoreHostNet puts back, at cleanup, what plugins that reach the host
// leave there after every attachment is gone: the CNI-* iptables chains
// that were not there before (portmap's CNI-HOSTPORT-* chains and the rules
// jumping to them; an attachment's own chains are its DEL's to remove, and
// the test should assert they are gone), and net.ipv4.ip_forward (bridge's
// isGateway sets it). If another user's attachment chain (CNI-DN-*, a
// CNI-<hash> masquerade chain) appeared meanwhile, the shared chains are left
// alone: they are in use.
func RestoreHostNet(t testing.TB) {
	t.Helper()
	before := cniChains()
	const fwd = "/proc/sys/net/ipv4/ip_forward"
	fwdBefore, _ := os.ReadFile(fwd)
	t.Cleanup(func() {
		if now, _ := os.ReadFile(fwd); len(fwdBefore) > 0 && string(now) != string(fwdBefore) {
			if err := os.WriteFile(fwd, fwdBefore, 0o644); err != nil {
				t.Errorf("restoring %s: %v", fwd, err)
			}
		}
		if err := removeNewCNIChains(before); err != nil {
			t.Errorf("removing the iptables chains the plugins created: %v", err)
		}
	})
}

type chain struct{ cmd, table, name string }

var (
	iptablesCmds   = []string{"iptables", "ip6tables"}
	iptablesTables = []string{"nat", "filter", "mangle"}
)

// IPTablesRules is `cmd -t table -S` in lines (nil when unavailable).
func IPTablesRules(cmd, table string) []string {
	out, err := exec.Command(cmd, "-w", "5", "-t", table, "-S").Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func cniChains() map[chain]bool {
	m := map[chain]bool{}
	for _, cmd := range iptablesCmds {
		for _, table := range iptablesTables {
			for _, l := range IPTablesRules(cmd, table) {
				if name, ok := strings.CutPrefix(l, "-N "); ok && strings.HasPrefix(name, "CNI-") {
					m[chain{cmd, table, name}] = true
				}
			}
		}
	}
	return m
}

func removeNewCNIChains(before map[chain]bool) error {
	var added []chain
	for c := range cniChains() {
		if !before[c] {
			added = append(added, c)
		}
	}
	for _, c := range added {
		if !strings.HasPrefix(c.name, "CNI-HOSTPORT-") {
			return fmt.Errorf("left alone: %s -t %s %s appeared (an attachment's own chain: this test's DEL left it, or another user's is live)",
				c.cmd, c.table, c.name)
		}
	}
	var errs []error
	run := func(cmd string, args ...string) {
		if out, err := exec.Command(cmd, append([]string{"-w", "5"}, args...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s %v: %w: %s", cmd, args, err, out))
		}
	}
	for _, c := range added { // rules jumping to them, then the chains
		for _, l := range IPTablesRules(c.cmd, c.table) {
			if rule, ok := strings.CutPrefix(l, "-A "); ok && strings.Contains(l+" ", " -j "+c.name+" ") {
				run(c.cmd, append([]string{"-t", c.table, "-D"}, splitRule(rule)...)...)
			}
		}
	}
	for _, c := range added {
		run(c.cmd, "-t", c.table, "-F", c.name)
	}
	for _, c := range added {
		run(c.cmd, "-t", c.table, "-X", c.name)
	}
	return errors.Join(errs...)
}

// splitRule splits an `iptables -S` rule into arguments, keeping quoted
// strings (comments) whole.
func splitRule(rule string) []string {
	var out []string
	var cur strings.Builder
	quoted, escaped, wasQuoted := false, false, false
	for _, r := range rule {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quoted:
			escaped = true
		case r == '"':
			quoted, wasQuoted = !quoted, true
		case r == ' ' && !quoted:
			if cur.Len() > 0 || wasQuoted {
				out = append(out, cur.String())
			}
			cur.Reset()
			wasQuoted = false
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 || wasQuoted {
		out = append(out, cur.String())
	}
	return out
}
