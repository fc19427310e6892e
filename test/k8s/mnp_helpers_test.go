package k8s

// Helpers of the MultiNetworkPolicy tests: policies through the dynamic
// client, real TCP and UDP listeners and dialers run by the test process
// inside pods' network namespaces, probe pods, and nftables read-only
// listings.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	mnpv1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/nft"
	"github.com/nri-cni/nri-cni/test/harness"
)

const (
	// mnpPort: every listener of the MultiNetworkPolicy tests, TCP and UDP.
	mnpPort = 5201
	// A probe that must pass gets up to passTries tries of passTimeout; one
	// that must fail, one try of failTimeout (a drop shows as a timeout).
	passTries   = 3
	passTimeout = 2 * time.Second
	failTimeout = time.Second
	// pollTimeout: one try while waiting for an update's effect (the
	// resolution of the latencies logged; a bridge on this host answers in
	// well under a millisecond).
	pollTimeout = 250 * time.Millisecond
)

// withMNP makes sure kubernetes.multiNetworkPolicy is on for the test.
// The overlay turns it on tier-wide (with the CRD and
// deploy/multinetworkpolicy's RBAC and admission policy); a deployment
// without it gets it here: nri-cni restarts with it, and again without it
// at the end.
func (f *fixture) withMNP() {
	f.t.Helper()
	cm, err := f.k.CoreV1().ConfigMaps("kube-system").Get(f.ctx, "nri-cni", metav1.GetOptions{})
	require.NoError(f.t, err)
	var conf struct {
		Kubernetes struct {
			MultiNetworkPolicy struct {
				Enabled bool `json:"enabled"`
			} `json:"multiNetworkPolicy"`
		} `json:"kubernetes"`
	}
	require.NoError(f.t, yaml.Unmarshal([]byte(cm.Data["nri.conf"]), &conf))
	if conf.Kubernetes.MultiNetworkPolicy.Enabled {
		return
	}
	f.withNRIConf(func(conf map[string]any) {
		k, _ := conf["kubernetes"].(map[string]any)
		require.NotNil(f.t, k, "nri.conf has a kubernetes section")
		k["multiNetworkPolicy"] = map[string]any{"enabled": true}
	})
}

func (f *fixture) mnps(ns string) dynamic.ResourceInterface {
	f.t.Helper()
	c, err := dynamic.NewForConfig(f.w.c.RESTConfig)
	require.NoError(f.t, err)
	return c.Resource(mnpv1.GroupVersionResource).Namespace(ns)
}

// applyMNP creates the MultiNetworkPolicy ns/name, or replaces the spec and
// policy-for of the one there; it returns when the API server answered.
func (f *fixture) applyMNP(ns, name, policyFor string, spec networkingv1.NetworkPolicySpec) time.Time {
	f.t.Helper()
	p := &mnpv1.MultiNetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: mnpv1.SchemeGroupVersion.String(), Kind: "MultiNetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{ownerLabel: f.owner},
			Annotations: map[string]string{netpol.PolicyForAnnotation: policyFor}},
		Spec: spec,
	}
	c := f.mnps(ns)
	if old, err := c.Get(f.ctx, name, metav1.GetOptions{}); err == nil {
		p.ResourceVersion = old.GetResourceVersion()
		u := toUnstructured(f, p)
		_, err = c.Update(f.ctx, u, metav1.UpdateOptions{})
		require.NoError(f.t, err, "updating MultiNetworkPolicy %s/%s", ns, name)
		return time.Now()
	}
	_, err := c.Create(f.ctx, toUnstructured(f, p), metav1.CreateOptions{})
	require.NoError(f.t, err, "creating MultiNetworkPolicy %s/%s", ns, name)
	f.t.Cleanup(func() { _ = c.Delete(f.ctx, name, metav1.DeleteOptions{}) })
	return time.Now()
}

func toUnstructured(f *fixture, p *mnpv1.MultiNetworkPolicy) *unstructured.Unstructured {
	f.t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	require.NoError(f.t, err)
	return &unstructured.Unstructured{Object: m}
}

// labelsSel is a podSelector / namespaceSelector of matchLabels.
func labelsSel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

// portsOf are policy ports of mnpPort for the protocols.
func portsOf(protos ...corev1.Protocol) []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for _, p := range protos {
		port := intstr.FromInt32(mnpPort)
		out = append(out, networkingv1.NetworkPolicyPort{Protocol: &p, Port: &port})
	}
	return out
}

// patchPod merge-patches the pod's metadata (labels or annotations).
func (f *fixture) patchPod(ns, name, patch string) time.Time {
	f.t.Helper()
	_, err := f.k.CoreV1().Pods(ns).Patch(f.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(f.t, err, "patching pod %s/%s with %s", ns, name, patch)
	return time.Now()
}

// labelled is f.pod with extra labels.
func (f *fixture) labelled(name, ns string, annotations map[string]string, kv ...string) *corev1.Pod {
	p := f.pod(name, ns, annotations)
	for i := 0; i+1 < len(kv); i += 2 {
		p.Labels[kv[i]] = kv[i+1]
	}
	return p
}

// netnsOf is the pod's netns path once it is Ready.
func (f *fixture) netnsOf(ns, name string) string {
	f.t.Helper()
	_, st := f.readySandbox(f.waitReady(ns, name))
	return st.NetnsPath
}

// addrOf is the first address of the interface in the netns.
func (f *fixture) addrOf(netnsPath, ifname string) string {
	f.t.Helper()
	itf, ok, err := harness.PodIface(netnsPath, ifname)
	require.NoError(f.t, err)
	require.True(f.t, ok && len(itf.Addrs) > 0, "%s with an address in %s", ifname, netnsPath)
	return itf.Addrs[0].IP.String()
}

// listen starts a TCP listener (it writes "ok" to each connection) and a
// UDP echo on mnpPort in the netns; the test's cleanup closes them.
func (f *fixture) listen(netnsPath string) {
	f.t.Helper()
	var tl net.Listener
	var ul net.PacketConn
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		if tl, err = net.Listen("tcp", ":"+strconv.Itoa(mnpPort)); err != nil {
			return err
		}
		if ul, err = net.ListenPacket("udp", ":"+strconv.Itoa(mnpPort)); err != nil {
			tl.Close()
			return err
		}
		return nil
	})
	require.NoError(f.t, err, "listening in %s", netnsPath)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for {
			n, from, err := ul.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = ul.WriteTo(buf[:n], from)
		}
	}()
	f.t.Cleanup(func() { tl.Close(); ul.Close(); wg.Wait() })
}

// dial connects once from the netns to addr:mnpPort over proto and
// exchanges a message: TCP reads the listener's "ok", UDP its echo.
func dial(netnsPath, proto, addr string, timeout time.Duration) error {
	return ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		c, err := net.DialTimeout(proto, net.JoinHostPort(addr, strconv.Itoa(mnpPort)), timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		if proto == "udp" {
			if _, err := c.Write([]byte("ping")); err != nil {
				return err
			}
		}
		buf := make([]byte, 8)
		n, err := io.ReadAtLeast(c, buf, 2)
		if err != nil {
			return err
		}
		if got := string(buf[:n]); got != "ok" && got != "ping" {
			return fmt.Errorf("unexpected answer %q", got)
		}
		return nil
	})
}

// conn is one probe: from a pod's netns to an address, over a protocol.
type conn struct {
	from, fromNetns string // a name for messages, the netns path
	to, addr        string
	proto           string
}

func (c conn) String() string {
	return fmt.Sprintf("%s → %s (%s) %s/%d", c.from, c.to, c.addr, c.proto, mnpPort)
}

// mustPass: the connection works within passTries tries.
func (f *fixture) mustPass(c conn) {
	f.t.Helper()
	var errs []error
	for i := 0; i < passTries; i++ {
		err := dial(c.fromNetns, c.proto, c.addr, passTimeout)
		if err == nil {
			return
		}
		errs = append(errs, err)
	}
	f.t.Errorf("%s: must pass, failed %d tries: %v", c, passTries, errors.Join(errs...))
}

// mustFail: one try fails.
func (f *fixture) mustFail(c conn) {
	f.t.Helper()
	if err := dial(c.fromNetns, c.proto, c.addr, failTimeout); err == nil {
		f.t.Errorf("%s: must be refused, connected", c)
	}
}

// untilEffect probes c (one try of pollTimeout each) until it passes
// (wantPass) or fails, and returns when the probe that showed it started
// (its packets left then: the effect was in place).
func (f *fixture) untilEffect(c conn, wantPass bool) time.Time {
	f.t.Helper()
	var seen time.Time
	f.waitFor(fmt.Sprintf("%s %s", c, map[bool]string{true: "passes", false: "is refused"}[wantPass]), waitLong,
		func() (bool, string) {
			seen = time.Now()
			err := dial(c.fromNetns, c.proto, c.addr, pollTimeout)
			return (err == nil) == wantPass, fmt.Sprint(err)
		})
	return seen
}

// probePod runs `/pause --probe proto addr:mnpPort` as the only container
// of a pod (restartPolicy Never) and returns the container's exit code and
// output: 0 connected, 3 blocked.
func (f *fixture) probePod(ns, name, proto, addr string, annotations map[string]string, kv ...string) (int32, string) {
	f.t.Helper()
	p := f.labelled(name, ns, annotations, kv...)
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers[0].Command = []string{"/pause", "--probe", proto, net.JoinHostPort(addr, strconv.Itoa(mnpPort))}
	f.create(p)
	var code int32
	f.waitFor("probe pod "+ns+"/"+name+" terminated", waitLong, func() (bool, string) {
		got, err := f.k.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cs := range got.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				code = cs.State.Terminated.ExitCode
				return true, ""
			}
		}
		return false, fmt.Sprintf("phase %s, %v", got.Status.Phase, got.Status.ContainerStatuses)
	})
	out, _ := f.w.c.Kubectl(f.ctx, "-n", ns, "logs", name)
	return code, strings.TrimSpace(out)
}

// nftTables are the inet tables of the netns ("" = this process's, the
// host's), read only.
func nftTables(netnsPath string) ([]string, error) {
	var opts []nftables.ConnOption
	if netnsPath != "" {
		fd, err := os.Open(netnsPath)
		if err != nil {
			return nil, err
		}
		defer fd.Close()
		opts = append(opts, nftables.WithNetNSFd(int(fd.Fd())))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, err
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range ts {
		names = append(names, t.Name)
	}
	return names, nil
}

// nftChains are the chains of nri-cni's table in the netns.
func nftChains(netnsPath string) ([]string, error) {
	fd, err := os.Open(netnsPath)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(fd.Fd())))
	if err != nil {
		return nil, err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == nft.TableName {
			names = append(names, ch.Name)
		}
	}
	return names, nil
}
