package plan

// Fuzz targets for the parsers of tenant input (issue 18: pod annotations,
// NPWG elements and their cni-args, the container spec's annotations in
// hook mode). Each asserts what the parser promises, not only that it does
// not panic. Plain `go test` runs the seeds below and those under
// testdata/fuzz/; `make fuzz` runs each target for a while.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
)

// Seed material shared by the annotation targets: each known attack.
var (
	fzThousands     = strings.TrimSuffix(strings.Repeat("net-a,", 3000), ",")
	fzThousandsJSON = "[" + strings.TrimSuffix(strings.Repeat(`{"name":"net-a"},`, 3000), ",") + "]"
	fzBig           = strings.Repeat("a", 30<<10) // 30 KB
	fzNested        = strings.Repeat("[", 20000)
	fzNestedArgs    = `[{"name":"net-a","cni-args":` + strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000) + "}]"
	fzBigArgs       = `[{"name":"net-a","cni-args":{"k":"` + fzBig + `"}}]`
)

// fzMax maps a fuzzed byte to a valid limits.maxNetworksPerPod (1-99).
func fzMax(b uint8) int { return int(b)%99 + 1 }

const fzPodNS = "ns1"

func FuzzNPWGAnnotation(f *testing.F) {
	for _, s := range []string{
		"net-a", "other/net-a@net5, net-b", " net-a , net-a@net9,x.y",
		`[{"name":"net-a","namespace":"ns1","interface":"net1","ips":["10.1.2.3/24","fd00::3/64"],"mac":"02:00:00:00:00:01",` +
			`"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"TCP","hostIP":"192.0.2.1"}],` +
			`"bandwidth":{"ingressRate":1000000,"ingressBurst":1000,"egressRate":1000,"egressBurst":2147483647},` +
			`"cni-args":{"k":"v","n":12345678901234567890},"default-route":["10.1.2.1","fd00::1"]}]`,
		`[{"name":"a","interfaceRequest":"x1"},{"name":"b","interface":"x2","interfaceRequest":"x3"}]`,
		`[{"name":"a","default-route":["10.0.0.1"]},{"name":"b","default-route":["10.0.0.2"]}]`,
		`[{"name":"a","default-route":["10.0.0.1","10.0.0.2"]}]`,
		`[{"name":"a","infiniband-guid":"x"}]`, `[{"name":"a","ipam-claim-reference":null}]`, `[{"name":"a","bogus":1}]`,
		fzThousands, fzThousandsJSON, fzBig, fzBigArgs, fzNested, fzNestedArgs,
		"../../etc", "../../../../etc/cron.d", `[{"name":"../../etc"}]`, `[{"name":"x","namespace":"../.."}]`, "net-a@../../x",
		"nét-a", "net-a@ｅth1", `[{"name":"\u0430"}]`, "net-a@eth0\u200b", "net-a@\xff", "ns\u0131/a",
		"", " ", ",", "null", "[]", "[null]", "{}", `{"name":"a"}`, "[{}]", "[1]", `["a"]`, "/net-a", "ns/", "a/b/c", "a@", "a@eth0", "a@lo",
		`[{"name":"a","bandwidth":{"ingressRate":99999999999999999999999,"ingressBurst":1}}]`,
		`[{"name":"a","bandwidth":{"ingressRate":1000000000000001,"ingressBurst":1}}]`,
		`[{"name":"a","bandwidth":{"ingressRate":-1,"ingressBurst":-1}}]`,
		`[{"name":"a","bandwidth":{"ingressRate":1000,"ingressBurst":2147483648}}]`,
		`[{"name":"a","bandwidth":{}}]`,
		`[{"name":"a","portMappings":[{"hostPort":4294967377,"containerPort":80}]}]`,
		`[{"name":"a","portMappings":[{"hostPort":1,"containerPort":1,"protocol":"icmp"}]}]`,
		`[{"name":"a","ips":["::ffff:10.0.0.1/120"]}]`, `[{"name":"a","ips":[]}]`, `[{"name":"a","ips":["10.0.0.1"]}]`,
		`[{"name":"a","mac":"01:00:5e:00:00:01"}]`, `[{"name":"a","mac":"00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00"}]`,
		`[{"name":"a","default-route":[]}]`, `[{"name":"a","default-route":["::ffff:10.0.0.1","10.0.0.1"]}]`,
		// NPWG v1.3: what the spec says to ignore, and its own examples.
		`[{"name":"net-a"},{"name":"net-b","ipam-claim-reference":"vm123.tenantblue"}]`,
		`[{"name":"a","ipam-claim-reference":"c","ips":["10.0.0.1"]}]`, `[{"name":"a","ipam-claim-reference":1}]`,
		`[{"name":"a","IPAM-Claim-Reference":"c"}]`, `[{"name":"a","ipam-claim-reference":""}]`,
		`[{"name":"net-b","org.foo.bar.key-name":{"x":[1]},"mac":"02:23:45:67:89:01"}]`,
		`[{"org.x.y":1,"name":"a","org.x.y":2,"name":"b"}]`, `[{"name":"a","io.kubevirt.x":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `}]`,
		`[{"name":"a","org..x":1}]`, `[{"name":"a",".x":1}]`, `[{"name":"a","x.":1}]`, `[{"name":"a","k8s.v1.cni.cncf.io/networks":"b"}]`,
		`[{"name":"a","org.example.x":1}]`, `[{"name":"a","name.x":1}]`, `[{"name":"a","ips":["1.2.3.4"],"mac":"aa:bb:cc:dd:ee:ff"}]`,
		`[{"name":"a","ips":["10.2.2.42/24","2001:db8::5/64","2001:db8::6","fe80::1%eth0"]}]`, `[{"name":"a","ips":["10.0.0.1/"]}]`,
		`[{"name":"net-a"},{"name":"net-b","default-route":["10.0.0.1"]}]`, `[{"name":"a","default-route":[]},{"name":"b","default-route":["10.0.0.1"]}]`,
		`[{"name":"net-b","bandwidth":{"ingressRate":2048,"ingressBurst":300,"egressRate":8000,"egressBurst":200}}]`,
		`[{"name":"net-b","ipRequest":"1.2.3.4","macRequest":"aa:bb:cc:dd:ee:ff"}]`, `[{"name":"net-b","deviceID":"0000:18:02.5"}]`,
	} {
		f.Add(s, uint8(31))
	}
	f.Add("a,b,c", uint8(1)) // max 2
	f.Add(`[{"name":"a"},{"name":"b"}]`, uint8(0))
	f.Fuzz(func(t *testing.T, value string, maxB uint8) {
		max := fzMax(maxB)
		sels, err := ParseNPWGNetworks(value, fzPodNS, max)
		if err != nil {
			if sels != nil {
				t.Fatalf("selections with an error: %v", err)
			}
			if !errors.Is(err, ErrBadAnnotation) && !errors.Is(err, ErrUnsupportedField) && !errors.Is(err, ErrLimit) {
				t.Fatalf("error wraps none of ErrBadAnnotation, ErrUnsupportedField, ErrLimit: %v", err)
			}
			var le *LimitError
			if errors.As(err, &le) && (le.Max != max || le.Got <= max || le.Key != config.MaxNetworksPerPodKey) {
				t.Fatalf("limit error %+v for max %d", le, max)
			}
			if !strings.Contains(err.Error(), AnnotationNPWGNetworks) {
				t.Fatalf("error does not name the annotation: %v", err)
			}
			return
		}
		if len(sels) == 0 || len(sels) > max {
			t.Fatalf("%d selections, want 1 to %d", len(sels), max)
		}
		gateways := map[bool]int{} // IPv4? -> count over all elements
		for i, s := range sels {
			checkFuzzSelection(t, i, s)
			for _, gw := range s.DefaultRoute {
				gateways[gw.To4() != nil]++
			}
		}
		if gateways[true] > 1 || gateways[false] > 1 {
			t.Fatalf("more than one default route per family: %v", gateways)
		}
	})
}

// checkFuzzSelection asserts what ParseNPWGNetworks promises of one element.
func checkFuzzSelection(t *testing.T, i int, s NetworkSelection) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Fatalf("element %d %+v: "+format, append([]any{i + 1, s}, args...)...)
	}
	if !dnsLabel(s.Ref.Namespace) || !dnsSubdomain(s.Ref.Name) {
		fail("invalid reference %q", s.Ref)
	}
	if s.Interface != "" && (!ifnameRe.MatchString(s.Interface) || s.Interface == "eth0" || s.Interface == "lo") {
		fail("unusable interface %q", s.Interface)
	}
	if s.IPs != nil && len(s.IPs) == 0 {
		fail("empty ips")
	}
	for _, ip := range s.IPs {
		if _, _, err := net.ParseCIDR(ip); err != nil && (strings.Contains(ip, "/") || net.ParseIP(ip) == nil) {
			fail("ip %q is neither an address nor an address/prefix", ip)
		}
	}
	if s.IPAMClaim != "" && s.IPs != nil {
		fail("ips and an IPAM claim together")
	}
	for _, k := range s.Extensions {
		if !extensionKey(k) {
			fail("ignored key %q is no extension key", k)
		}
	}
	if s.MAC != "" {
		mac, err := net.ParseMAC(s.MAC)
		if err != nil || len(mac) != 6 || mac[0]&1 == 1 {
			fail("mac %q is not a unicast Ethernet address (%v)", s.MAC, err)
		}
	}
	for _, pm := range s.PortMappings {
		if pm.HostPort < 1 || pm.HostPort > 65535 || pm.ContainerPort < 1 || pm.ContainerPort > 65535 ||
			!slices.Contains([]string{"tcp", "udp", "sctp"}, pm.Protocol) || pm.HostIP != "" && net.ParseIP(pm.HostIP) == nil {
			fail("port mapping %+v", pm)
		}
	}
	if s.Bandwidth != nil {
		checkFuzzBandwidth(t, s.Bandwidth, false)
	}
	if len(s.DefaultRoute) > 2 {
		fail("%d default routes", len(s.DefaultRoute))
	}
}

// checkFuzzBandwidth asserts a bandwidth capability value: each rate within
// [1e3, 1e15] with a burst of 1 to MaxInt32 (exactly MaxInt32 for the
// annotations, as the kubelet sets it).
func checkFuzzBandwidth(t *testing.T, bw map[string]any, kubeletBurst bool) {
	t.Helper()
	if len(bw) == 0 {
		t.Fatalf("empty bandwidth")
	}
	for _, dir := range []string{"ingress", "egress"} {
		rate, hasRate := bw[dir+"Rate"]
		burst, hasBurst := bw[dir+"Burst"]
		if hasRate != hasBurst {
			t.Fatalf("bandwidth %v: %s rate without burst or burst without rate", bw, dir)
		}
		if !hasRate {
			continue
		}
		r, ok1 := rate.(int64)
		b, ok2 := burst.(int64)
		if !ok1 || !ok2 {
			if bi, ok := burst.(int); ok && kubeletBurst {
				b, ok2 = int64(bi), true
			}
		}
		if !ok1 || !ok2 || r < minBandwidth || r > maxBandwidth || b < 1 || b > math.MaxInt32 ||
			kubeletBurst && b != math.MaxInt32 {
			t.Fatalf("bandwidth %v: %s rate %v or burst %v out of bounds", bw, dir, rate, burst)
		}
	}
}

// FuzzNetworkConfig: a DRA claim's NetworkConfig (the JSON object's
// members after apiVersion and kind), alone and under a DeviceClass config,
// through ParseNetworkConfig. nri-cni's own API stays strict: whatever it
// accepts has no key the NPWG annotation would only ignore.
func FuzzNetworkConfig(f *testing.F) {
	for _, s := range []string{
		``, `,"interface":"data0","ips":["10.1.0.5/24","10.1.0.6"],"mac":"02:00:00:00:00:05","default-route":["10.1.0.1"]`,
		`,"default-route":[]`, `,"cni-args":{"vlan":1}`, `,"bandwidth":{"ingressRate":1000000,"ingressBurst":1000}`,
		`,"ipam-claim-reference":"vm1"`, `,"IPAM-Claim-Reference":"vm1"`, `,"ipam-claim-reference":null`, `,"ipam-claim-reference":""`,
		`,"org.example.foo":1`, `,"io.kubevirt.x":true,"interface":"a1"`, `,"name":"x"`, `,"Name":"x"`, `,"nameſpace":"x"`,
		`,"infiniband-guid":"x"`, `,"interfaces":"x"`, `,"interface":"eth0"`, `,"ips":[]`, `,"kind":"Other"`, `,"apiVersion":"v1"`,
		`,"interface":"a1","interface":"a2"`, `,"ips":["10.0.0.1/33"]`, `}` + fzNested, `,"cni-args":` + strings.Repeat(`{"a":`, 500) + "1" + strings.Repeat("}", 500),
	} {
		f.Add(s, "")
		f.Add(`,"interface":"data0"`, s)
	}
	f.Fuzz(func(t *testing.T, claim, class string) {
		configs := []ClaimConfig{{Raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig"` + claim + `}`)}}
		if class != "" {
			configs = append(configs, ClaimConfig{FromClass: true,
				Raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig"` + class + `}`)})
		}
		sel, err := ParseNetworkConfig("ResourceClaim ns1/c request \"r\"", configs, 16<<10)
		if err != nil {
			if !errors.Is(err, ErrBadClaimConfig) || !strings.Contains(err.Error(), `ResourceClaim ns1/c request "r"`) {
				t.Fatalf("error is not ErrBadClaimConfig naming the request: %v", err)
			}
			return
		}
		if sel.IPAMClaim != "" || sel.Extensions != nil || sel.Ref != (NADRef{}) {
			t.Fatalf("accepted what a NetworkConfig refuses: %+v", sel)
		}
		for _, c := range configs {
			var keys map[string]json.RawMessage
			if json.Unmarshal(c.Raw, &keys) != nil {
				t.Fatalf("accepted a config that is not an object: %s", c.Raw)
			}
			for k := range keys {
				if extensionKey(k) || strings.EqualFold(k, KeyIPAMClaimReference) {
					t.Fatalf("accepted key %q", k)
				}
			}
		}
		sel.Ref = NADRef{"ns1", "net"}
		checkFuzzSelection(t, 0, sel)
	})
}

// FuzzSelectionAnnotation: nri-cni.io/networks through Manager.plan, as a
// pod's sandbox reaches it (podSelection on, the limits fuzzed too).
func FuzzSelectionAnnotation(f *testing.F) {
	var nets []*cni.Network
	loaded := map[*cni.Network]bool{}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		n, err := cni.Parse([]byte(`{"cniVersion":"1.1.0","name":"` + name + `","plugins":[{"type":"x"}]}`))
		if err != nil {
			f.Fatal(err)
		}
		nets, loaded[n] = append(nets, n), true
	}
	base := config.Default()
	base.Networks = []string{"alpha", "beta", "gamma"}
	for _, s := range []string{
		"alpha", " beta, gamma@eth5 ", "alpha@net1, beta", "alpha@net2,beta,gamma", "alpha,alpha@x1,alpha",
		"alpha@x1, beta@x1", "alpha,,beta", "alpha@eth0", "alpha@lo", "alpha@", "delta", "alpha@this-name-is-too-long",
		strings.TrimSuffix(strings.Repeat("alpha,", 3000), ","), fzBig, "alpha@" + fzBig,
		"../../etc", "alpha@../../x", "alpha@a/b", "álpha", "alpha@ｅth1", "alpha@net\u200b1", "alpha@\xff",
		"", " ", ",", "null", "[]", fzNested, `[{"name":"alpha"}]`, "alpha@99999999999999999999", "alpha@1e-999999999",
	} {
		f.Add(s, uint8(31), uint16(16<<10-256))
	}
	f.Add("alpha,beta,gamma", uint8(1), uint16(0))                // 2 networks
	f.Add(strings.Repeat(" ", 300)+"alpha", uint8(31), uint16(0)) // 256 bytes
	f.Fuzz(func(t *testing.T, value string, maxB uint8, bytesB uint16) {
		cfg := base
		cfg.PodSelection = true
		cfg.Limits = config.Limits{MaxNetworksPerPod: fzMax(maxB), MaxAnnotationBytes: 256 + int(bytesB)}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		p := New(cfg, Catalogue{Local: func() []*cni.Network { return nets }})
		pl, err := p.Plan(context.Background(), Pod{Namespace: fzPodNS, Annotations: map[string]string{AnnotationNetworks: value}})
		plan, skip := pl.Attachments, pl.Skip
		if len(value) > cfg.Limits.MaxAnnotationBytes {
			var le *LimitError
			if !errors.As(err, &le) || le.What != "bytes" || le.Key != config.MaxAnnotationBytesKey {
				t.Fatalf("%d bytes over a limit of %d: want a size *LimitError, got %v", len(value), cfg.Limits.MaxAnnotationBytes, err)
			}
		}
		if err != nil {
			if plan != nil || skip != "" {
				t.Fatalf("a plan or skip with an error: %v", err)
			}
			if !errors.Is(err, ErrBadAnnotation) && !errors.Is(err, ErrLimit) {
				t.Fatalf("error wraps neither ErrBadAnnotation nor ErrLimit: %v", err)
			}
			return
		}
		if skip != "" {
			if plan != nil || strings.TrimSpace(value) != "" {
				t.Fatalf("skipped (%s) a non-empty value %q", skip, value)
			}
			return
		}
		if len(plan) == 0 || len(plan) > cfg.Limits.MaxNetworksPerPod {
			t.Fatalf("%d attachments, want 1 to %d", len(plan), cfg.Limits.MaxNetworksPerPod)
		}
		if want := strings.Count(value, ",") + 1; len(plan) != want {
			t.Fatalf("%d attachments for %d entries", len(plan), want)
		}
		seen := map[string]bool{}
		for i, a := range plan {
			if !loaded[a.Network] {
				t.Fatalf("attachment %d: network %q is not a loaded config", i+1, a.Network.Name)
			}
			if !usableIfname(a.IfName) {
				t.Fatalf("attachment %d: unusable interface %q", i+1, a.IfName)
			}
			if seen[a.IfName] {
				t.Fatalf("interface %q used twice in %v", a.IfName, plan)
			}
			seen[a.IfName] = true
		}
	})
}

// fzCapAnnotations are the capability annotations in FuzzCapabilityArgs'
// argument order, with their capability.
var fzCapAnnotations = []capabilityAnnotation{
	{AnnotationIngressBandwidth, config.CapabilityBandwidth}, {AnnotationEgressBandwidth, config.CapabilityBandwidth},
	{AnnotationMAC, config.CapabilityMAC}, {AnnotationIPs, config.CapabilityIPs}, {AnnotationPortMappings, config.CapabilityPortMappings},
}

// fzCapabilities are the capabilities FuzzCapabilityArgs allows by bit.
var fzCapabilities = []string{config.CapabilityBandwidth, config.CapabilityMAC, config.CapabilityIPs, config.CapabilityPortMappings}

// fzMaxAnnotation is the largest value limits.maxAnnotationBytes lets
// through to capabilityArgs (what the API server allows for all of them).
const fzMaxAnnotation = 256 << 10

// FuzzCapabilityArgs: the capability annotations (bit i of present sets the
// i-th of fzCapAnnotations) under a fuzzed podCapabilities (bit i of allowed
// lists fzCapabilities[i]).
func FuzzCapabilityArgs(f *testing.F) {
	ports := `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":53,"containerPort":53,"protocol":"UDP","hostIP":"::1"}]`
	f.Add("10M", "1Gi", "02:00:00:00:00:01", "10.1.2.3/24,fd00::3/64", ports, uint8(0x1f), uint8(0x0f))
	f.Add("10M", "1Gi", "02:00:00:00:00:01", "10.1.2.3/24", ports, uint8(0x1f), uint8(0x01))     // only bandwidth allowed
	f.Add("1e-999999999", "", "", "", "", uint8(0x01), uint8(0x0f))                              // minutes in ParseQuantity alone
	f.Add("18446744.073709552E", "1844674407370955.1617E", "", "", "", uint8(0x03), uint8(0x01)) // int64 wraps into range
	for _, bw := range []string{
		"1e999999999", "1e-99", "1e15", "1e16", "1e3", "999", "0", "1.5", "1000.000000001", "9999999999999999", "9999999999999999E",
		"9999999999999999.999999999Ei", "1E", "1Ei", "1P", "1.000000001P", "1m", "1000000m", "-1M", "+1M", " 10M ", "10 M", "１０M",
		"0x10", "1_000", "NaN", "Inf", "", fzBig, "1" + strings.Repeat("0", 30<<10),
	} {
		f.Add(bw, bw, "", "", "", uint8(0x03), uint8(0x01))
	}
	for _, mac := range []string{"01:00:5e:00:00:01", "00:00:00:00:00:00:00:00", "0200.0000.0001", "02-00-00-00-00-01", "", "zz", fzBig} {
		f.Add("", "", mac, "", "", uint8(0x04), uint8(0x0f))
	}
	for _, ips := range []string{"10.0.0.1", "10.0.0.1/24,,", "", "../../etc", "::ffff:10.0.0.1/120", "10.0.0.1/33", strings.Repeat("10.0.0.1/8,", 3000) + "10.0.0.1/8"} {
		f.Add("", "", "", ips, "", uint8(0x08), uint8(0x0f))
	}
	for _, pm := range []string{"null", "[]", "{}", `[{"hostPort":0,"containerPort":80}]`, `[{"hostPort":80,"containerPort":80,"protocol":"icmp"}]`,
		`[{"hostPort":80,"containerPort":80,"bogus":1}]`, `[{"hostPort":4294967377,"containerPort":80}]`, `[{"hostPort":1e400}]`,
		`[{"hostPort":80,"containerPort":80,"hostIP":"x"}]`, fzNested, "[" + strings.Repeat(`{"hostPort":1,"containerPort":1},`, 3000) + "{}]"} {
		f.Add("", "", "", "", pm, uint8(0x10), uint8(0x0f))
	}
	f.Fuzz(func(t *testing.T, ingress, egress, mac, ips, ports string, present, allowed uint8) {
		values := []string{ingress, egress, mac, ips, ports}
		ann := map[string]string{"unrelated": "x"}
		for i, ca := range fzCapAnnotations {
			if present&(1<<i) != 0 {
				if len(values[i]) > fzMaxAnnotation {
					return // refused by checkAnnotationSizes before this parser
				}
				ann[ca.annotation] = values[i]
			}
		}
		var list []string
		for i, c := range fzCapabilities {
			if allowed&(1<<i) != 0 {
				list = append(list, c)
			}
		}
		pc := newPodCapabilities(list)
		start := time.Now()
		caps, err := capabilityArgs(ann, pc)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("capabilityArgs took %s", d)
		}
		disallowed := false
		for _, ca := range fzCapAnnotations {
			if _, set := ann[ca.annotation]; set && !pc.allowed[ca.capability] {
				disallowed = true
			}
		}
		if disallowed && !errors.Is(err, ErrCapabilityNotAllowed) {
			t.Fatalf("an annotation of a capability not allowed: want ErrCapabilityNotAllowed, got %v", err)
		}
		if err != nil {
			if caps != nil {
				t.Fatalf("capabilities with an error: %v", err)
			}
			if !errors.Is(err, ErrCapabilityNotAllowed) && !errors.Is(err, ErrBadAnnotation) {
				t.Fatalf("error wraps neither ErrCapabilityNotAllowed nor ErrBadAnnotation: %v", err)
			}
			return
		}
		for k, v := range caps {
			if !pc.allowed[k] {
				t.Fatalf("capability %q (%v) is not allowed (allowed %v)", k, v, list)
			}
		}
		_, in := ann[AnnotationIngressBandwidth]
		_, eg := ann[AnnotationEgressBandwidth]
		if bw, ok := caps["bandwidth"]; ok != (in || eg) {
			t.Fatalf("bandwidth %v for annotations ingress %v egress %v", bw, in, eg)
		} else if ok {
			checkFuzzBandwidth(t, bw.(map[string]any), true)
			for key, dir := range map[string]string{AnnotationIngressBandwidth: "ingress", AnnotationEgressBandwidth: "egress"} {
				if v, ok := ann[key]; ok {
					checkFuzzRate(t, v, bw.(map[string]any)[dir+"Rate"].(int64))
				}
			}
			if _, ok := bw.(map[string]any)["ingressRate"]; ok != in {
				t.Fatalf("bandwidth %v for ingress annotation %v", bw, in)
			}
		}
		if v, ok := caps["mac"]; ok {
			hw, err := net.ParseMAC(v.(string))
			if err != nil || len(hw) != 6 || hw[0]&1 == 1 {
				t.Fatalf("mac %v is not a unicast Ethernet address (%v)", v, err)
			}
		}
		if v, ok := caps["ips"]; ok {
			for _, ip := range v.([]string) {
				if _, _, err := net.ParseCIDR(ip); err != nil {
					t.Fatalf("ip %q: %v", ip, err)
				}
			}
		}
		if v, ok := caps["portMappings"]; ok {
			checkFuzzSelection(t, 0, NetworkSelection{Ref: NADRef{"ns", "n"}, PortMappings: v.([]portMapping)})
		}
	})
}

// checkFuzzRate: an accepted bandwidth value is the quantity written,
// rounded up to a whole bit per second (never an int64 wrapped around).
func checkFuzzRate(t *testing.T, value string, rate int64) {
	t.Helper()
	q, err := resource.ParseQuantity(strings.TrimSpace(value))
	if err != nil {
		t.Fatalf("%q accepted as %d but is no quantity: %v", value, rate, err)
	}
	want := new(big.Float).SetPrec(256)
	want.SetString(q.AsDec().String())
	if diff := new(big.Float).Sub(new(big.Float).SetInt64(rate), want); diff.Sign() < 0 || diff.Cmp(big.NewFloat(1)) >= 0 {
		t.Fatalf("%q (%s) accepted as rate %d", value, want.Text('g', 30), rate)
	}
}

// fzCNIArgsPolicies are nri.conf's podCNIArgs/podCapabilities pairs
// FuzzCNIArgs picks from (each a valid config).
var fzCNIArgsPolicies = []struct{ args, caps []string }{
	{nil, config.DefaultPodCapabilities()},
	{[]string{"k8s-profile", "vlan", "cni-note"}, config.DefaultPodCapabilities()},
	{[]string{"ips", "mac", "sysctl", "vlan", "admin-key"}, []string{"bandwidth", "ips", "mac", "sysctl"}},
	{[]string{"vlan", "ips"}, []string{"ips"}},
}

// fzArgsNet is a NAD's config whose plugins set args of their own (the
// admin's, never overridden), with numbers float64 cannot hold exactly.
const fzArgsNet = `{"cniVersion":"1.0.0","name":"net-a","plugins":[
 {"type":"bridge","bridge":"br-a","args":{"cni":{"admin-key":"admin","big":12345678901234567890123},"other":{"x":1}},
  "ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}},
 {"type":"tuning","capabilities":{"mac":true},"mtu":1.50e3},
 {"type":"bandwidth","args":{"cni":{}},"x":[1,{"args":{"cni":{"vlan":1}}}]}]}`

// FuzzCNIArgs: an NPWG element's cni-args (args, the JSON value of the
// key) through checkCNIArgs under one of fzCNIArgsPolicies, then onto a
// network with Owned and WithCNIArgs, as planNPWG does.
func FuzzCNIArgs(f *testing.F) {
	base, err := cni.Parse([]byte(fzArgsNet))
	if err != nil {
		f.Fatal(err)
	}
	original := slices.Clone(base.List.Bytes)
	var managers []*Planner
	for _, p := range fzCNIArgsPolicies {
		cfg := config.Default()
		cfg.PodCNIArgs, cfg.PodCapabilities = p.args, p.caps
		if err := cfg.Validate(); err != nil {
			f.Fatal(err)
		}
		managers = append(managers, New(cfg, Catalogue{}))
	}
	for _, s := range []string{
		`{"vlan":100}`, `{"vlan":100,"k8s-profile":"gold","cni-note":null}`, `{"admin-key":"tenant"}`, `{"big":1}`,
		`{"ips":["10.1.2.3/24","10.1.2.4"]}`, `{"ips":[]}`, `{"ips":"10.0.0.1"}`, `{"ips":[1]}`,
		`{"mac":"02:00:00:00:00:01"}`, `{"mac":"01:00:5e:00:00:01"}`, `{"mac":2}`,
		`{"sysctl":{"net.ipv4.conf.IFNAME.proxy_arp":"1"}}`, `{"sysctl":{"kernel.core_pattern":"|/tmp/x"}}`,
		`{"sysctl":{"net/../../kernel/x":"1"}}`, `{"sysctl":{"net.ipv4.conf.all.forwarding":1}}`, `{"sysctl":[]}`,
		`{"vlan":1e400}`, `{"vlan":99999999999999999999999999999}`, `{"vlan":-0.0}`, `{"vlan":"\u0000\ud800"}`,
		`{"vlan":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + "}", `{"vlan":"` + fzBig + `"}`,
		`{"../../etc":1}`, `{"VLAN":1}`, `{"vlan ":1}`, `{"":1}`, `{"vlan":1,"vlan":2}`, `{"nri-cni.io/owner":{"nad":"kube-system/x"}}`,
		`{}`, `null`, `[]`, `1`, `"x"`, ``, `{"vlan":1}},{"name":"net-b","cni-args":{"ips":["10.0.0.1"]}`,
	} {
		for i := range fzCNIArgsPolicies {
			f.Add(s, uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, args string, policy uint8) {
		m := managers[int(policy)%len(managers)]
		sels, err := ParseNPWGNetworks(`[{"name":"net-a","cni-args":`+args+`}]`, fzPodNS, 99)
		if err != nil {
			return // FuzzNPWGAnnotation's
		}
		for i, sel := range sels {
			err := checkCNIArgs(m.cfg.PodCNIArgs, m.podCaps, fmt.Sprintf("element %d", i+1), sel.CNIArgs)
			checkFuzzCNIArgsVerdict(t, m, sel.CNIArgs, err)
			if err != nil {
				continue
			}
			owned, err := base.Owned(cni.Owner{NAD: "ns1/net-a"})
			if err != nil {
				t.Fatal(err)
			}
			n, err := owned.WithCNIArgs(sel.CNIArgs)
			if !slices.Equal(base.List.Bytes, original) {
				t.Fatalf("the shared network was modified")
			}
			checkFuzzWithCNIArgs(t, owned, n, sel.CNIArgs, err)
		}
	})
}

// checkFuzzCNIArgsVerdict: a key podCNIArgs does not list is always
// refused; a listed key that is not a capability is always accepted.
func checkFuzzCNIArgsVerdict(t *testing.T, m *Planner, args map[string]any, err error) {
	t.Helper()
	unlisted, capKey := false, false
	for k := range args {
		if !slices.Contains(m.cfg.PodCNIArgs, k) {
			unlisted = true
		}
		if _, ok := config.CNIArgCapabilities()[k]; ok {
			capKey = true
		}
	}
	switch {
	case unlisted && err == nil:
		t.Fatalf("cni-args %v accepted with podCNIArgs %v", args, m.cfg.PodCNIArgs)
	case !unlisted && !capKey && err != nil:
		t.Fatalf("cni-args %v refused with podCNIArgs %v: %v", args, m.cfg.PodCNIArgs, err)
	case err != nil && !errors.Is(err, ErrCNIArgsNotAllowed) && !errors.Is(err, ErrCapabilityNotAllowed) && !errors.Is(err, ErrBadAnnotation):
		t.Fatalf("error wraps none of ErrCNIArgsNotAllowed, ErrCapabilityNotAllowed, ErrBadAnnotation: %v", err)
	}
}

// checkFuzzWithCNIArgs: the copy carrying accepted args parses with
// libcni, keeps the network's name, plugins, owner and the admin's own
// args.cni, and has the tenant's keys as given. It fails only on a key the
// admin's args.cni sets, or on a number libcni cannot decode.
func checkFuzzWithCNIArgs(t *testing.T, owned, n *cni.Network, args map[string]any, err error) {
	t.Helper()
	before := fzDecode(t, owned.List.Bytes)
	conflict := false
	for _, p := range before["plugins"].([]any) {
		if a, ok := p.(map[string]any)["args"].(map[string]any); ok {
			if c, ok := a["cni"].(map[string]any); ok {
				for k := range args {
					if _, set := c[k]; set {
						conflict = true
					}
				}
			}
		}
	}
	if err != nil {
		if conflict != errors.Is(err, cni.ErrArgsConflict) || !conflict && libcniDecodes(t, args) {
			t.Fatalf("cni-args %v (conflict %v): %v", args, conflict, err)
		}
		return
	}
	if conflict {
		t.Fatalf("cni-args %v override the admin's args.cni", args)
	}
	if len(args) == 0 {
		if n != owned {
			t.Fatalf("no cni-args: want the network itself")
		}
		return
	}
	if _, err := libcni.NetworkConfFromBytes(n.List.Bytes); err != nil {
		t.Fatalf("config with cni-args does not parse: %v", err)
	}
	if n.Name != owned.Name || n.List.Name != owned.List.Name || n.List.CNIVersion != owned.List.CNIVersion ||
		len(n.List.Plugins) != len(owned.List.Plugins) {
		t.Fatalf("network changed: %q %q %d plugins", n.Name, n.List.Name, len(n.List.Plugins))
	}
	if o, ok := cni.OwnerOf(n.List.Bytes); !ok || o.NAD != "ns1/net-a" {
		t.Fatalf("owner marker changed: %+v %v", o, ok)
	}
	after := fzDecode(t, n.List.Bytes)
	for k := range before {
		if k != "plugins" && !reflect.DeepEqual(before[k], after[k]) {
			t.Fatalf("top-level key %q changed", k)
		}
	}
	if len(after) != len(before) {
		t.Fatalf("top-level keys changed: %v", after)
	}
	for i, p := range before["plugins"].([]any) {
		bp, ap := p.(map[string]any), after["plugins"].([]any)[i].(map[string]any)
		if n.List.Plugins[i].Network.Type != owned.List.Plugins[i].Network.Type {
			t.Fatalf("plugin %d type changed", i)
		}
		for k := range bp {
			if k != "args" && !reflect.DeepEqual(bp[k], ap[k]) {
				t.Fatalf("plugin %d key %q changed", i, k)
			}
		}
		bargs, _ := bp["args"].(map[string]any)
		aargs := ap["args"].(map[string]any)
		for k := range bargs {
			if k != "cni" && !reflect.DeepEqual(bargs[k], aargs[k]) {
				t.Fatalf("plugin %d args.%s changed", i, k)
			}
		}
		bcni, _ := bargs["cni"].(map[string]any)
		acni := aargs["cni"].(map[string]any)
		for k, v := range bcni {
			if !reflect.DeepEqual(v, acni[k]) {
				t.Fatalf("plugin %d: the admin's args.cni %q changed to %v", i, k, acni[k])
			}
		}
		for k, v := range args {
			if !reflect.DeepEqual(fzRoundTrip(t, v), acni[k]) {
				t.Fatalf("plugin %d: args.cni %q is %v, want %v", i, k, acni[k], v)
			}
		}
		if len(acni) != len(bcni)+len(args) {
			t.Fatalf("plugin %d: args.cni has %d keys, want %d", i, len(acni), len(bcni)+len(args))
		}
	}
}

// fzDecode decodes a config keeping numbers exact.
func fzDecode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var out map[string]any
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// fzRoundTrip is v encoded and decoded again (as it reads in a config).
func fzRoundTrip(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(map[string]any{"v": v})
	if err != nil {
		t.Fatal(err)
	}
	return fzDecode(t, data)["v"]
}

// libcniDecodes reports whether libcni's plain decoding (numbers as
// float64) takes args.
func libcniDecodes(t *testing.T, args map[string]any) bool {
	t.Helper()
	data, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	return json.Unmarshal(data, &v) == nil
}
