package migrate

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/plan"
)

// NADReport is one NetworkAttachmentDefinition that kubernetes.nadPolicy
// (or kubernetes.maxNADConfigBytes) refuses: every node refuses to attach
// it, and the admission policy nri-cni-nad-policy warns about (or, in deny
// mode, refuses) writing it.
type NADReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// PolicyKey is the verdict code: the nri.conf key that refuses the NAD,
	// as the node's error and the admission policy's message both name it
	// ("kubernetes.nadPolicy.default.masters",
	// "kubernetes.maxNADConfigBytes").
	PolicyKey string `json:"policyKey"`
	// Detail is the node's words (nadpolicy.Violation): the offending key
	// or value, what is wrong, what the policy key allows.
	Detail string `json:"detail"`
}

// NADCheck is the check's answer for the listed NADs.
type NADCheck struct {
	// Listed counts the NADs judged: those of Input.Namespace, or all.
	Listed int `json:"listed"`
	// Refused are the NADs the policy refuses, by namespace and name.
	Refused []NADReport `json:"refused"`
}

// checkNADs judges every listed NAD of namespace ("" = all) as the node's
// cache does (the catalogue: plan.ParseNADConfig, whose size and policy
// checks are nadpolicy's, the code the admission policy is generated from)
// and keeps those the policy refuses. A NAD the policy allows but libcni
// cannot parse is not listed here: the admission policy admits it, and the
// pods naming it are listed (bad-nad).
func checkNADs(cat *catalogue, namespace string) NADCheck {
	refs := slices.SortedFunc(maps.Keys(cat.nads), func(a, b plan.NADRef) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	out := NADCheck{Refused: []NADReport{}}
	for _, ref := range refs {
		if namespace != "" && ref.Namespace != namespace {
			continue
		}
		out.Listed++
		_, err := cat.Network(ref)
		var v *nadpolicy.Violation
		if !errors.As(err, &v) {
			continue
		}
		out.Refused = append(out.Refused, NADReport{Namespace: ref.Namespace, Name: ref.Name, PolicyKey: v.PolicyKey, Detail: v.Error()})
	}
	return out
}

// writeTable writes the refused NADs for people, then their count by
// policy key.
func (c NADCheck) writeTable(w io.Writer) error {
	if len(c.Refused) > 0 {
		fmt.Fprintf(w, "\nNetworkAttachmentDefinitions kubernetes.nadPolicy refuses (nodes running nri-cni do not attach them; %s warns about writing them, or refuses in deny mode):\n",
			nadpolicy.AdmissionPolicyName)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMESPACE\tNAD\tPOLICY KEY\tDETAIL")
		for _, n := range c.Refused {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Namespace, n.Name, n.PolicyKey, n.Detail)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	counts := map[string]int{}
	for _, n := range c.Refused {
		counts[n.PolicyKey]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	by := ""
	if len(parts) > 0 {
		by = ": " + strings.Join(parts, ", ")
	}
	_, err := fmt.Fprintf(w, "\n%d of %d NetworkAttachmentDefinitions refused by kubernetes.nadPolicy%s\n", len(c.Refused), c.Listed, by)
	return err
}
