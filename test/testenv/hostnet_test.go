package testenv

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestSplitRule(t *testing.T) {
	for in, want := range map[string][]string{
		`POSTROUTING -s 10.1.0.5/32 -m comment --comment "name: \"masq\" id: \"c1\"" -j CNI-abc`: {
			"POSTROUTING", "-s", "10.1.0.5/32", "-m", "comment", "--comment", `name: "masq" id: "c1"`, "-j", "CNI-abc"},
		`OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT`: {
			"OUTPUT", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "CNI-HOSTPORT-DNAT"},
		`X --comment ""`: {"X", "--comment", ""},
	} {
		if got := splitRule(in); !reflect.DeepEqual(got, want) {
			t.Errorf("splitRule(%q) = %q, want %q", in, got, want)
		}
	}
}

// The DHCP server answers a client on its bridge (busybox udhcpc).
func TestDHCPServer(t *testing.T) {
	RequireRoot(t)
	br := UniqueName("ncdb")
	s := StartDHCPServer(t, br, "10.199.77.0/24")
	c := NewNetNS(t)
	l, err := netlink.LinkByName(br)
	if err != nil {
		t.Fatal(err)
	}
	host := UniqueName("ncdh")
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host, MasterIndex: l.Attrs().Index}, PeerName: "eth0",
		PeerNamespace: netlink.NsFd(int(c.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DeleteLink(host) })
	if err := netlink.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("nsenter", "--net="+c.Path(), "sh", "-c",
		"ip link set eth0 up && timeout 10 busybox udhcpc -i eth0 -n -q -s /bin/true").CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(s.Log)
		t.Fatalf("udhcpc: %v\n%s\nudhcpd:\n%s", err, out, log)
	}
	if !strings.Contains(string(out), "obtained from "+s.ServerIP.String()) {
		t.Errorf("udhcpc: %s", out)
	}
}
