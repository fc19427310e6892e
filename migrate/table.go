package migrate

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nri-cni/nri-cni/plan"
)

// WriteTable writes r for people: one row per pod, then the summary.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tNRI-CNI\tVS MULTUS\tNETWORKS\tREASON\tDETAIL")
	for _, p := range r.Pods {
		detail := p.Detail
		for _, ig := range p.Ignored {
			detail = strings.TrimPrefix(detail+"; ignored: "+ig, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Verdict, p.Multus,
			orDash(networkList(p.Networks)), orDash(string(p.Reason)), orDash(detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := r.Summary
	fmt.Fprintf(w, "\n%d pods ask for networks (%s), of %d listed (%d finished, not judged)\n",
		s.Pods, plan.AnnotationNPWGNetworks, s.Listed, s.Finished)
	fmt.Fprintf(w, "  %d would work unchanged\n", s.Same)
	fmt.Fprintf(w, "  %d would differ%s\n", s.Differs, r.reasons(Differs))
	if _, err := fmt.Fprintf(w, "  %d fail with Multus too%s\n", s.FailsBoth, r.reasons(FailsBoth)); err != nil {
		return err
	}
	return r.NADs.writeTable(w)
}

// reasons counts the pods compared as c by reason: ": a 2, b 1".
func (r Report) reasons(c Comparison) string {
	counts := map[Reason]int{}
	for _, p := range r.Pods {
		if p.Multus == c {
			counts[p.Reason]++
		}
	}
	if len(counts) == 0 {
		return ""
	}
	var parts []string
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", reason, counts[reason]))
	}
	return ": " + strings.Join(parts, ", ")
}

// networkList renders networks as "ns/nad@ifname", with Multus's name when
// it differs.
func networkList(nets []Network) string {
	parts := make([]string, 0, len(nets))
	for _, n := range nets {
		name := n.NAD
		if name == "" {
			name = n.Network
		}
		s := name + "@" + n.Interface
		if n.MultusInterface != "" {
			s += " (Multus: " + n.MultusInterface + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
