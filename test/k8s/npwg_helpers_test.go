package k8s

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

const (
	npwgAnnotation   = "k8s.v1.cni.cncf.io/networks"
	statusAnnotation = "k8s.v1.cni.cncf.io/network-status"
)

// statusEntry is an NPWG network-status entry as the tests read it.
type statusEntry struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips"`
	Mac       string   `json:"mac"`
	// Mtu: the ADD result's interface MTU (the reference bridge plugin
	// reports none: 0).
	Mtu     int  `json:"mtu,omitempty"`
	Default bool `json:"default"`
	// Gateway: the gateways of the pod's default routes via it, as the
	// NPWG client library reads them.
	Gateway []string `json:"gateway,omitempty"`
	// DefaultRoute: the gateways of the default routes nri-cni set via it.
	DefaultRoute []string `json:"default-route,omitempty"`
}

// nadNet is a NetworkAttachmentDefinition a test created: a bridge network
// with host-local IPAM on a bridge and subnet of its own (the address files
// land in the node's libcni dir, CacheDir/networks/<cni name>, as inside
// nri-cni's container).
type nadNet struct {
	Namespace, Name string // the object
	CNIName         string // spec.config's name
	Bridge, Subnet  string
	f               *fixture
}

func (f *fixture) nads() nadclient.Interface {
	f.t.Helper()
	c, err := nadclient.NewForConfig(f.w.c.RESTConfig)
	require.NoError(f.t, err)
	return c
}

// bridgeConfig is a conflist on bridge (host-local on subnet) with tuning
// declaring the mac capability.
func bridgeConfig(cniName, bridge, subnet string) string {
	data, _ := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": cniName,
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": bridge, "isGateway": false, "ipMasq": false,
				"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": subnet}}}}},
			map[string]any{"type": "tuning", "capabilities": map[string]bool{"mac": true}},
		},
	})
	return string(data)
}

// newNAD creates a NAD in ns with a bridge network of its own; the test's
// cleanup deletes the object and the bridge.
func (f *fixture) newNAD(ns, name string) *nadNet {
	f.t.Helper()
	n := &nadNet{Namespace: ns, Name: name, CNIName: "cni-" + name, Bridge: k8sdeploy.NADBridge(),
		Subnet: k8sdeploy.NADSubnet(), f: f}
	f.createNAD(ns, name, bridgeConfig(n.CNIName, n.Bridge, n.Subnet))
	f.t.Cleanup(func() { _ = deleteLink(n.Bridge) })
	return n
}

// createNAD creates the object (config "" = the confDir network of that
// name); the cleanup deletes it.
func (f *fixture) createNAD(ns, name, config string) {
	f.t.Helper()
	nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels: map[string]string{ownerLabel: f.owner}}, Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}
	_, err := f.nads().K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Create(f.ctx, nad, metav1.CreateOptions{})
	require.NoError(f.t, err, "NAD %s/%s", ns, name)
	f.t.Cleanup(func() { f.deleteNAD(ns, name) })
}

func (f *fixture) deleteNAD(ns, name string) {
	_ = f.nads().K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Delete(f.ctx, name, metav1.DeleteOptions{})
}

// ipFiles are host-local's address files of the network's sandboxes.
func (n *nadNet) ipFiles(ids ...string) []string {
	s := harness.Secondary{Name: n.CNIName, IPAMDir: filepath.Join(n.f.w.o.CacheDir, "networks")}
	return s.IPFilesOf(ids...)
}

// contains reports whether addr ("ip/len" or "ip") is in the NAD's subnet.
func (n *nadNet) contains(addr string) bool {
	_, subnet, err := net.ParseCIDR(n.Subnet)
	if err != nil {
		return false
	}
	ip := net.ParseIP(strings.Split(addr, "/")[0])
	return ip != nil && subnet.Contains(ip)
}

// namespace creates a namespace (once an earlier test's namespace of that
// name is gone: the overlay's DevicesNamespace serves several tests); the
// cleanup deletes it.
func (f *fixture) namespace(name string) {
	f.t.Helper()
	var err error
	f.waitFor("namespace "+name+" created", waitLong, func() (bool, string) {
		_, err = f.k.CoreV1().Namespaces().Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return true, ""
		}
		old, gerr := f.k.CoreV1().Namespaces().Get(f.ctx, name, metav1.GetOptions{})
		return gerr == nil && old.DeletionTimestamp == nil, fmt.Sprintf("an earlier one is being deleted: %v", err)
	})
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = f.k.CoreV1().Namespaces().Delete(f.ctx, name, metav1.DeleteOptions{}) })
}

// networkStatus waits until the pod's network-status annotation is there
// and holds want entries, and returns it with the time it was first seen.
func (f *fixture) networkStatus(ns, name string, want int) []statusEntry {
	f.t.Helper()
	var entries []statusEntry
	f.waitFor(fmt.Sprintf("network-status of %s/%s with %d entries", ns, name, want), waitLong, func() (bool, string) {
		p, err := f.k.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		v, ok := p.Annotations[statusAnnotation]
		if !ok {
			return false, "no annotation"
		}
		entries = nil
		if err := json.Unmarshal([]byte(v), &entries); err != nil {
			return false, err.Error()
		}
		return len(entries) == want, v
	})
	return entries
}

// networkStatusNow is the pod's network-status as it is now (nil when the
// pod or the annotation is missing).
func (f *fixture) networkStatusNow(ns, name string) []statusEntry {
	p, err := f.k.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	var entries []statusEntry
	if err := json.Unmarshal([]byte(p.Annotations[statusAnnotation]), &entries); err != nil {
		return nil
	}
	return entries
}

func toJSON(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

// bareIP is the address of "ip/len".
func bareIP(cidr string) string { return strings.Split(cidr, "/")[0] }

// events are the pod's events as "Reason: message" (every source).
func (f *fixture) events(ns, pod string) []string {
	evs, err := f.k.CoreV1().Events(ns).List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, ev := range evs.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return out
}

// waitEvent waits for an event of the pod with reason whose message holds
// every part, and returns the message.
func (f *fixture) waitEvent(ns, pod, reason string, parts ...string) string {
	f.t.Helper()
	var msg string
	f.waitFor(fmt.Sprintf("%s event of %s/%s naming %q", reason, ns, pod, parts), waitLong, func() (bool, string) {
		evs := f.events(ns, pod)
		for _, ev := range evs {
			r, m, _ := strings.Cut(ev, ": ")
			if r != reason {
				continue
			}
			all := true
			for _, p := range parts {
				all = all && strings.Contains(m, p)
			}
			if all {
				msg = m
				return true, ""
			}
		}
		return false, fmt.Sprintf("events: %q", evs)
	})
	return msg
}

// iface is the interface of the pod's ready sandbox (asserting it exists).
func (f *fixture) iface(pod *corev1.Pod, ifname string) harness.Iface {
	f.t.Helper()
	_, st := f.readySandbox(pod)
	itf, ok, err := harness.PodIface(st.NetnsPath, ifname)
	require.NoError(f.t, err)
	require.True(f.t, ok, "%s in %s/%s", ifname, pod.Namespace, pod.Name)
	require.NotEmpty(f.t, itf.Addrs, "%s has an address", ifname)
	return itf
}

func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link del %s: %w: %s", name, err, out)
	}
	return nil
}

// since is a short duration for logs.
func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
