package nadpolicy

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Mode is what the generated binding does with a NetworkAttachmentDefinition
// the policy refuses (its validationActions). Whatever the mode, every node
// judges each NAD again before any CNI call (plan.ParseNADConfig): admission
// only decides whether a refused NAD can be written.
type Mode string

// Modes.
const (
	// ModeWarn ([Warn, Audit]) admits the NAD, returns the refusal to the
	// client as a warning (kubectl prints it) and records it in the API
	// server's audit log. The default: it refuses nothing, so applying it
	// cannot break a cluster whose NADs another implementation (Multus)
	// serves.
	ModeWarn Mode = "warn"
	// ModeAudit ([Audit]) admits the NAD and only records the refusal in
	// the audit log (for clients that treat warnings as errors).
	ModeAudit Mode = "audit"
	// ModeDeny ([Deny]) refuses the write.
	ModeDeny Mode = "deny"
)

// DefaultMode is the binding's mode unless WithMode says otherwise.
const DefaultMode = ModeWarn

// Modes lists the modes, the default first.
func Modes() []Mode { return []Mode{ModeWarn, ModeAudit, ModeDeny} }

// ValidationActions are m's validationActions.
func (m Mode) ValidationActions() ([]string, error) {
	switch m {
	case ModeWarn:
		return []string{"Warn", "Audit"}, nil
	case ModeAudit:
		return []string{"Audit"}, nil
	case ModeDeny:
		return []string{"Deny"}, nil
	}
	return nil, fmt.Errorf("%w %q: want one of %s", ErrBadMode, string(m), modeList())
}

// ErrBadMode is wrapped when a mode is none of Modes.
var ErrBadMode = errors.New("unknown admission mode")

// ErrBadSelector is wrapped by every selector that does not parse.
var ErrBadSelector = errors.New("bad label selector")

func modeList() string {
	s := make([]string, 0, 3)
	for _, m := range Modes() {
		s = append(s, string(m))
	}
	return strings.Join(s, ", ")
}

// Option changes the generated binding.
type Option func(*binding) error

// binding is how the generated ValidatingAdmissionPolicyBinding applies the
// policy.
type binding struct {
	mode              Mode
	namespaceSelector *selector
	objectSelector    *selector
}

// WithMode sets the binding's mode ("" = DefaultMode).
func WithMode(m Mode) Option {
	return func(b *binding) error {
		if m == "" {
			m = DefaultMode
		}
		if _, err := m.ValidationActions(); err != nil {
			return err
		}
		b.mode = m
		return nil
	}
}

// WithNamespaceSelector limits the binding to NADs in namespaces whose
// labels match s, a label selector in kubectl's -l syntax
// ("kubernetes.io/metadata.name notin (multus-nets)", "team=a,!legacy";
// "" = every namespace). Namespace labels are the cluster admin's.
func WithNamespaceSelector(s string) Option {
	return func(b *binding) error {
		sel, err := parseSelector(s)
		if err != nil {
			return fmt.Errorf("namespace selector: %w", err)
		}
		b.namespaceSelector = sel
		return nil
	}
}

// WithObjectSelector limits the binding to NADs whose own labels match s
// (syntax as WithNamespaceSelector; "" = every NAD). Whoever writes a NAD
// sets its labels: a way to phase a rollout in, never a boundary (the
// node judges every NAD whatever its labels).
func WithObjectSelector(s string) Option {
	return func(b *binding) error {
		sel, err := parseSelector(s)
		if err != nil {
			return fmt.Errorf("object selector: %w", err)
		}
		b.objectSelector = sel
		return nil
	}
}

// selector is a parsed label selector: equality requirements as
// matchLabels, the others as matchExpressions (in the order given).
type selector struct {
	labels      [][2]string // key, value; sorted by key
	expressions []expression
}

type expression struct {
	key, op string // In, NotIn, Exists, DoesNotExist
	values  []string
}

var (
	// A label key: an optional DNS subdomain prefix and "/", then a name
	// of at most 63 characters (k8s.io/apimachinery's rules).
	labelNameRe   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelPrefixRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	labelValueRe  = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
	// One requirement: key, then an operator and its value(s), or none.
	setReqRe = regexp.MustCompile(`^(\S+)\s+(in|notin)\s*\(([^()]*)\)$`)
	eqReqRe  = regexp.MustCompile(`^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$`)
)

func checkKey(k string) error {
	name := k
	if prefix, n, ok := strings.Cut(k, "/"); ok {
		if len(prefix) == 0 || len(prefix) > 253 || !labelPrefixRe.MatchString(prefix) {
			return fmt.Errorf("%w: key %q: the prefix must be a DNS subdomain", ErrBadSelector, k)
		}
		name = n
	}
	if !labelNameRe.MatchString(name) {
		return fmt.Errorf("%w: key %q: a name of letters, digits, - _ . (at most 63, starting and ending with a letter or digit)", ErrBadSelector, k)
	}
	return nil
}

func checkValue(k, v string) error {
	if !labelValueRe.MatchString(v) {
		return fmt.Errorf("%w: %s: value %q: letters, digits, - _ . (at most 63, starting and ending with a letter or digit)", ErrBadSelector, k, v)
	}
	return nil
}

// splitRequirements splits s at the commas outside parentheses.
func splitRequirements(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
		if depth < 0 || depth > 1 {
			return nil, fmt.Errorf("%w %q: unbalanced parentheses", ErrBadSelector, s)
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%w %q: unbalanced parentheses", ErrBadSelector, s)
	}
	return append(out, strings.TrimSpace(s[start:])), nil
}

// parseSelector parses kubectl's label selector syntax: requirements
// separated by commas (all must hold), each `key`, `!key`, `key=value`
// (or ==), `key!=value`, `key in (v1,v2)` or `key notin (v1,v2)`. "" is
// nil: no selector. `!=` and `notin` match objects without the key too,
// as in kubectl.
func parseSelector(s string) (*selector, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	reqs, err := splitRequirements(s)
	if err != nil {
		return nil, err
	}
	sel := &selector{}
	seen := map[string]bool{}
	for _, r := range reqs {
		if r == "" {
			return nil, fmt.Errorf("%w %q: an empty requirement", ErrBadSelector, s)
		}
		var e expression
		switch m := setReqRe.FindStringSubmatch(r); {
		case m != nil:
			e.key, e.op = m[1], map[string]string{"in": "In", "notin": "NotIn"}[m[2]]
			if strings.TrimSpace(m[3]) == "" {
				return nil, fmt.Errorf("%w %q: %s %s (): no values", ErrBadSelector, s, m[1], m[2])
			}
			for _, v := range strings.Split(m[3], ",") {
				v = strings.TrimSpace(v)
				if err := checkValue(e.key, v); err != nil {
					return nil, err
				}
				e.values = append(e.values, v)
			}
		case eqReqRe.MatchString(r):
			m := eqReqRe.FindStringSubmatch(r)
			if err := checkKey(m[1]); err != nil {
				return nil, err
			}
			if err := checkValue(m[1], m[3]); err != nil {
				return nil, err
			}
			if m[2] != "!=" {
				if seen[m[1]] {
					return nil, fmt.Errorf("%w %q: %s=… given twice", ErrBadSelector, s, m[1])
				}
				seen[m[1]] = true
				sel.labels = append(sel.labels, [2]string{m[1], m[3]})
				continue
			}
			e = expression{key: m[1], op: "NotIn", values: []string{m[3]}}
		case strings.HasPrefix(r, "!"):
			e = expression{key: strings.TrimSpace(r[1:]), op: "DoesNotExist"}
		default:
			e = expression{key: r, op: "Exists"}
		}
		if err := checkKey(e.key); err != nil {
			return nil, err
		}
		sel.expressions = append(sel.expressions, e)
	}
	slices.SortFunc(sel.labels, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return sel, nil
}

// yaml renders sel as a LabelSelector at indent n (keys and values
// quoted: a value such as "true" or "1" must stay a string).
func (sel *selector) yaml(n int) []string {
	pad := strings.Repeat(" ", n)
	var out []string
	if len(sel.labels) > 0 {
		out = append(out, pad+"matchLabels:")
		for _, kv := range sel.labels {
			out = append(out, pad+"  "+quoteYAML(kv[0])+": "+quoteYAML(kv[1]))
		}
	}
	if len(sel.expressions) > 0 {
		out = append(out, pad+"matchExpressions:")
		for _, e := range sel.expressions {
			line := pad + "  - {key: " + quoteYAML(e.key) + ", operator: " + e.op
			if len(e.values) > 0 {
				q := make([]string, len(e.values))
				for i, v := range e.values {
					q[i] = quoteYAML(v)
				}
				line += ", values: [" + strings.Join(q, ", ") + "]"
			}
			out = append(out, line+"}")
		}
	}
	return out
}

// modeComment is the comment above the generated binding.
var modeComment = map[Mode][]string{
	ModeWarn: {
		"# Mode warn (nri-cni nad-policy --mode): a NAD the policy refuses is",
		"# admitted; the client gets the refusal as a warning and the audit log",
		"# records it. The nodes refuse to attach it all the same. Switch to",
		"# --mode deny once no node runs Multus and migrate-check lists no NAD",
		"# the policy refuses (docs/kubernetes.md).",
	},
	ModeAudit: {
		"# Mode audit (nri-cni nad-policy --mode): a NAD the policy refuses is",
		"# admitted and the refusal recorded in the audit log only. The nodes",
		"# refuse to attach it all the same (docs/kubernetes.md).",
	},
	ModeDeny: {
		"# Mode deny (nri-cni nad-policy --mode): a NAD the policy refuses",
		"# cannot be created, nor its spec.config changed (docs/kubernetes.md).",
	},
}

// writeBinding renders the ValidatingAdmissionPolicyBinding of policy name.
func writeBinding(w func(...string), name string, b binding) {
	actions, _ := b.mode.ValidationActions() // checked by WithMode
	w(modeComment[b.mode]...)
	w(`apiVersion: admissionregistration.k8s.io/v1`,
		`kind: ValidatingAdmissionPolicyBinding`,
		`metadata:`,
		`  name: `+name,
		`spec:`,
		`  policyName: `+name,
		`  validationActions: [`+strings.Join(actions, ", ")+`]`)
	if b.namespaceSelector == nil && b.objectSelector == nil {
		return
	}
	w(`  matchResources:`)
	if b.namespaceSelector != nil {
		w(`    namespaceSelector:`)
		w(b.namespaceSelector.yaml(6)...)
	}
	if b.objectSelector != nil {
		w(`    objectSelector:`)
		w(b.objectSelector.yaml(6)...)
	}
}
