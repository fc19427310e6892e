package hook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Bandwidth limits Kubernetes accepts for the bandwidth annotations.
const (
	minBandwidth = 1e3  // 1 kbit/s
	maxBandwidth = 1e15 // 1 Pbit/s
)

// capabilityArgs builds the CNI runtimeConfig from the pod's annotations.
// libcni hands each key only to plugins that declare the capability.
func capabilityArgs(ann map[string]string) (map[string]any, error) {
	caps := map[string]any{}
	bad := func(key, value string, err error) error {
		return fmt.Errorf("%w %s=%q: %w", ErrBadAnnotation, key, value, err)
	}
	bw := map[string]any{}
	for key, field := range map[string]string{AnnotationIngressBandwidth: "ingress", AnnotationEgressBandwidth: "egress"} {
		v, ok := ann[key]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil {
			return nil, bad(key, v, err)
		}
		rate := q.Value()
		if rate < minBandwidth || rate > maxBandwidth {
			return nil, bad(key, v, fmt.Errorf("must be between 1k and 1P bits per second"))
		}
		bw[field+"Rate"] = rate
		bw[field+"Burst"] = math.MaxInt32 // as the kubelet does: no burst limit
	}
	if len(bw) > 0 {
		caps["bandwidth"] = bw
	}
	if v, ok := ann[AnnotationMAC]; ok {
		mac, err := net.ParseMAC(strings.TrimSpace(v))
		switch {
		case err != nil:
			return nil, bad(AnnotationMAC, v, err)
		case len(mac) != 6:
			return nil, bad(AnnotationMAC, v, fmt.Errorf("want a 48-bit Ethernet address"))
		case mac[0]&1 == 1:
			return nil, bad(AnnotationMAC, v, fmt.Errorf("a multicast address cannot be an interface's"))
		}
		caps["mac"] = mac.String()
	}
	if v, ok := ann[AnnotationIPs]; ok {
		var ips []string
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if _, _, err := net.ParseCIDR(s); err != nil {
				return nil, bad(AnnotationIPs, v, fmt.Errorf("%q: want address/prefix, e.g. 10.1.2.3/24", s))
			}
			ips = append(ips, s)
		}
		caps["ips"] = ips
	}
	if v, ok := ann[AnnotationPortMappings]; ok {
		pms, err := parsePortMappings(v)
		if err != nil {
			return nil, bad(AnnotationPortMappings, v, err)
		}
		caps["portMappings"] = pms
	}
	return caps, nil
}

// portMapping is the CNI portMappings capability entry.
type portMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
	HostIP        string `json:"hostIP,omitempty"`
}

func parsePortMappings(v string) ([]portMapping, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.DisallowUnknownFields()
	var pms []portMapping
	if err := dec.Decode(&pms); err != nil {
		return nil, fmt.Errorf(`want a JSON list like [{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]: %w`, err)
	}
	for i, pm := range pms {
		if pm.HostPort < 1 || pm.HostPort > 65535 || pm.ContainerPort < 1 || pm.ContainerPort > 65535 {
			return nil, fmt.Errorf("entry %d: ports must be 1-65535", i+1)
		}
		switch p := strings.ToLower(pm.Protocol); p {
		case "", "tcp", "udp", "sctp":
			pms[i].Protocol = p
			if p == "" {
				pms[i].Protocol = "tcp"
			}
		default:
			return nil, fmt.Errorf("entry %d: protocol %q: want tcp, udp or sctp", i+1, pm.Protocol)
		}
		if pm.HostIP != "" && net.ParseIP(pm.HostIP) == nil {
			return nil, fmt.Errorf("entry %d: hostIP %q is not an IP address", i+1, pm.HostIP)
		}
	}
	return pms, nil
}
