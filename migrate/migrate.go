// Package migrate answers, for a cluster that runs Multus today, what nri-cni
// would do with each pod that asks for networks with the NPWG annotation
// (k8s.v1.cni.cncf.io/networks): attach (which NADs, on which interfaces),
// refuse (nri-cni's own error, the one the pod would fail with) or ignore —
// and whether that is what Multus gives the pod.
//
// The verdict is plan.Planner's, the code nri-cni runs at RunPodSandbox, over
// a catalogue of the listed NetworkAttachmentDefinitions judged as the node
// judges them (plan.ParseNADConfig): never a second parser. What Multus does
// is modelled only where nri-cni's outcome alone cannot tell (multus.go).
//
// Pure: pods, NADs and nri.conf in, a Report out. The listing is kube's
// (kube.Reader), the command cmd/internal/cli's (migrate-check).
package migrate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/plan"
)

// Pod is what the check needs of a pod.
type Pod struct {
	Namespace, Name string
	// Annotations: at least those planning reads (plan.ReadAnnotations).
	Annotations map[string]string
	// HostNetwork: the pod has no network namespace of its own.
	HostNetwork bool
	// IPs are the pod's addresses (status.podIPs; none while Pending).
	IPs []string
}

// NAD is one NetworkAttachmentDefinition.
type NAD struct {
	Namespace, Name string
	// Config is spec.config.
	Config string
	// ResourceName is the NAD's k8s.v1.cni.cncf.io/resourceName annotation:
	// the device plugin resource Multus takes the pod's device from.
	ResourceName string
}

// Inventory is what the check reads from the cluster.
type Inventory struct {
	// Pods that carry the NPWG annotation (others are not judged).
	Pods []Pod
	NADs []NAD
	// Listed counts every pod the API returned; Finished those of them in
	// phase Succeeded or Failed, which are never started again and are not
	// judged.
	Listed, Finished int
}

// Input is everything a check judges.
type Input struct {
	Config config.Config
	// Local are nri-cni's confDir networks: a NAD with an empty spec.config
	// means the one of the NAD's name.
	Local []*cni.Network
	Inventory
	// Namespace, when set, limits the NADs judged on their own (NADs) to
	// that namespace's; pods are the Inventory's.
	Namespace string
}

// Verdict is what nri-cni does with a pod's NPWG annotation.
type Verdict string

// Verdicts.
const (
	Attach Verdict = "attach"
	Refuse Verdict = "refuse" // the pod fails to start (the kubelet retries)
	Ignore Verdict = "ignore" // the pod starts without the annotation's networks
)

// Comparison says how the verdict compares with what Multus gives the pod.
type Comparison string

// Comparisons.
const (
	Same    Comparison = "same"
	Differs Comparison = "differs"
	// FailsBoth: nri-cni refuses the pod and Multus fails it as well (a
	// NAD that does not exist, an annotation that is not JSON): broken, but
	// not by the migration.
	FailsBoth Comparison = "fails-with-multus-too"
)

// Network is one network nri-cni would attach.
type Network struct {
	// NAD is namespace/name; "" for a confDir network.
	NAD string `json:"nad,omitempty"`
	// Network is the CNI network's name.
	Network   string `json:"network"`
	Interface string `json:"interface"`
	// MultusInterface is the name Multus gives it, when it differs.
	MultusInterface string `json:"multusInterface,omitempty"`
	// Capabilities are the CNI runtimeConfig keys the pod asks for
	// (ips, mac, portMappings, bandwidth).
	Capabilities []string `json:"capabilities,omitempty"`
}

// PodReport is the check's answer for one pod.
type PodReport struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Verdict   Verdict    `json:"verdict"`
	Multus    Comparison `json:"multus"`
	// Reason classifies a refusal, an ignored annotation or a difference
	// (Reason* constants); "" when attached as Multus would.
	Reason Reason `json:"reason,omitempty"`
	// Detail is nri-cni's own words: the error the pod would fail with,
	// why the annotation is ignored, or what differs from Multus.
	Detail   string    `json:"detail,omitempty"`
	Networks []Network `json:"networks,omitempty"`
	// Ignored are what nri-cni leaves out of the pod's request without
	// failing it (plan.Note: an ipam-claim-reference, other
	// implementations' extension keys), in planning's words. Multus
	// ignores them too: they do not make a pod differ.
	Ignored []string `json:"ignored,omitempty"`
}

// Summary counts the pods judged.
type Summary struct {
	// Pods asking for networks (judged); Listed and Finished as Inventory.
	Pods     int `json:"pods"`
	Listed   int `json:"listed"`
	Finished int `json:"finished"`
	// Same: pods that would work unchanged.
	Same int `json:"same"`
	// Differs: pods nri-cni would treat differently.
	Differs int `json:"differs"`
	// FailsBoth: pods refused by nri-cni that Multus fails too.
	FailsBoth int `json:"failsWithMultusToo"`
	// ByReason counts the pods that differ or fail, by reason.
	ByReason map[Reason]int `json:"byReason"`
}

// Report is the check's result: one entry per pod asking for networks, by
// namespace and name.
type Report struct {
	Pods    []PodReport `json:"pods"`
	Summary Summary     `json:"summary"`
	// NADs are the listed NADs the policy refuses (nads.go).
	NADs NADCheck `json:"nads"`
}

// OK reports whether every pod would get what Multus gives it (pods that
// Multus fails as well do not count against it).
func (r Report) OK() bool { return r.Summary.Differs == 0 }

// Check judges every pod of in that carries the NPWG annotation. It stops
// with ctx's error when ctx ends; an invalid NAD policy in in.Config is an
// error (config.Parse refuses one already).
func Check(ctx context.Context, in Input) (Report, error) {
	policy, err := nadpolicy.New(in.Config.Kubernetes.NADPolicyOrDefault())
	if err != nil {
		return Report{}, err
	}
	cat := newCatalogue(in.NADs, policy, in.Config.Kubernetes.NADConfigLimit())
	local := slices.Clone(in.Local)
	planner := plan.New(in.Config, plan.Catalogue{Local: func() []*cni.Network { return local }, NADs: cat})
	j := judge{cfg: in.Config, planner: planner, cat: cat}

	pods := slices.Clone(in.Pods)
	slices.SortFunc(pods, func(a, b Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	rep := Report{Pods: []PodReport{}, Summary: Summary{Listed: in.Listed, Finished: in.Finished, ByReason: map[Reason]int{}}}
	for _, pod := range pods {
		if !Judges(pod.Annotations) {
			continue
		}
		r := j.pod(ctx, pod)
		if err := ctx.Err(); err != nil {
			// Planning stops at ctx's end: its answer is not the pod's.
			return Report{}, fmt.Errorf("stopped at pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		rep.add(r)
	}
	rep.NADs = checkNADs(cat, in.Namespace)
	return rep, nil
}

func (r *Report) add(p PodReport) {
	r.Pods = append(r.Pods, p)
	r.Summary.Pods++
	switch p.Multus {
	case Same:
		r.Summary.Same++
		return
	case Differs:
		r.Summary.Differs++
	case FailsBoth:
		r.Summary.FailsBoth++
	}
	r.Summary.ByReason[p.Reason]++
}

// judge judges pods with one planner.
type judge struct {
	cfg     config.Config
	planner *plan.Planner
	cat     *catalogue
}

// pod plans pod as RunPodSandbox would and compares the outcome with
// Multus's.
func (j judge) pod(ctx context.Context, pod Pod) PodReport {
	r := PodReport{Namespace: pod.Namespace, Name: pod.Name}
	value := pod.Annotations[plan.AnnotationNPWGNetworks]
	if pod.HostNetwork {
		// The runtime runs no CNI for it, so Multus never sees it, and
		// nri-cni skips a sandbox without a network namespace of its own.
		r.Verdict, r.Multus, r.Reason = Ignore, Same, ReasonHostNetwork
		r.Detail = "host network: no network namespace of its own, nothing is attached (by Multus neither)"
		return r
	}
	p, err := j.planner.Plan(ctx, plan.Pod{Namespace: pod.Namespace, Annotations: pod.Annotations})
	if err != nil {
		r.Verdict, r.Detail, r.Reason = Refuse, oneLine(err.Error()), classify(err)
		r.Multus = Differs
		if multusFailsToo(r.Reason, value) {
			r.Multus = FailsBoth
		}
		if !j.planner.NPWG() && r.Reason != ReasonDefaultNetwork {
			// Multus would attach the annotation's networks; nri-cni
			// fails the pod on something else entirely.
			r.Multus, r.Reason = Differs, ReasonNPWGOff
			r.Detail = npwgOff + "; and the pod fails: " + r.Detail
		}
		return r
	}
	r.Networks = networks(p.Attachments)
	if defaultNetworkIgnored(pod, p, &r) {
		return r
	}
	for _, n := range p.Notes {
		r.Ignored = append(r.Ignored, oneLine(n.Message))
	}
	switch {
	case !j.planner.NPWG():
		// What it gets instead, if anything, comes from nri-cni's own
		// selection (nri.conf's networks or nri-cni.io/networks).
		r.Verdict, r.Multus, r.Reason, r.Detail = Ignore, Differs, ReasonNPWGOff, npwgOff
		if p.Skip != "" {
			r.Detail += "; " + p.Skip
		}
	case p.Skip != "":
		r.Verdict, r.Detail = Ignore, p.Skip
		switch {
		case strings.TrimSpace(value) == "":
			// Multus attaches nothing for an empty annotation either.
			r.Multus, r.Reason = Same, ReasonOptedOut
		case !j.cfg.Namespaces.Allows(pod.Namespace):
			r.Multus, r.Reason = Differs, ReasonNamespaceFiltered
		default:
			r.Multus, r.Reason = Differs, ReasonOther
		}
	default:
		r.Verdict = Attach
		r.Multus, r.Reason, r.Detail = j.compare(value, pod.IPs, p.Attachments, r.Networks)
	}
	return r
}

// npwgOff explains an nri.conf that does not honour the annotation.
const npwgOff = "nri-cni ignores " + plan.AnnotationNPWGNetworks +
	" with this nri.conf (it needs a kubernetes: section with npwgAnnotation: true)"

// networks lists what a plan attaches.
func networks(atts []plan.Attachment) []Network {
	out := make([]Network, 0, len(atts))
	for _, a := range atts {
		out = append(out, Network{NAD: a.NAD, Network: a.Network.Name, Interface: a.IfName,
			Capabilities: slices.Sorted(maps.Keys(a.Caps))})
	}
	return out
}

// oneLine keeps a table row on one line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
