package deviceplugin_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/test/fakes/deviceplugin"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func linkNames(t *testing.T, n ns.NetNS) []string {
	t.Helper()
	var names []string
	err := n.Do(func(ns.NetNS) error {
		links, err := netlink.LinkList()
		for _, l := range links {
			if l.Attrs().Name != "lo" {
				names = append(names, l.Type()+":"+l.Attrs().Name)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// Privileged: the devices' interfaces, made in a private namespace standing
// in for the host's; one of them moved into a "pod" (as host-device does)
// is left alone at Stop, the others are removed.
func TestLinks(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		kind deviceplugin.LinkKind
		want func(ids []string) []string
	}{
		{deviceplugin.LinkDummy, func(ids []string) []string { return []string{"dummy:" + ids[0], "dummy:" + ids[1], "dummy:" + ids[2]} }},
		{deviceplugin.LinkVeth, func(ids []string) []string {
			var w []string
			for _, id := range ids {
				w = append(w, "veth:"+id, "veth:"+id+"p")
			}
			sort.Strings(w)
			return w
		}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			host, pod := testenv.NewNetNS(t), testenv.NewNetNS(t)
			dir := shortDir(t)
			startFakeKubelet(t, dir)
			p, err := deviceplugin.Start(context.Background(), deviceplugin.Config{
				ResourceName: res, Count: 3, Dir: dir, Links: tc.kind, NetNS: host.Path(), DevInfoDir: shortDir(t), NoReregister: true,
			})
			if errors.Is(err, unix.EOPNOTSUPP) && tc.kind == deviceplugin.LinkDummy {
				t.Skipf("this kernel has no dummy interfaces: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			ids := p.DeviceIDs()
			if got, want := linkNames(t, host), tc.want(ids); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("links %v, want %v", got, want)
			}
			// host-device moves the allocated device into the pod.
			err = host.Do(func(ns.NetNS) error {
				l, err := netlink.LinkByName(ids[1])
				if err != nil {
					return err
				}
				return netlink.LinkSetNsFd(l, int(pod.Fd()))
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			// What stays: the moved device, and a moved veth's peer.
			wantLeft := "[]"
			if tc.kind == deviceplugin.LinkVeth {
				wantLeft = "[veth:" + ids[1] + "p]"
			}
			if got := linkNames(t, host); fmt.Sprint(got) != wantLeft {
				t.Errorf("after Stop the namespace has %v, want %s", got, wantLeft)
			}
			if got := linkNames(t, pod); len(got) != 1 || got[0] != string(tc.kind)+":"+ids[1] {
				t.Errorf("the pod's device: %v", got)
			}
		})
	}
}
