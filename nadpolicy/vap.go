package nadpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nri-cni/nri-cni/config"
)

// AdmissionPolicyName names the generated ValidatingAdmissionPolicy and its
// binding.
const AdmissionPolicyName = "nri-cni-nad-policy"

// Annotations on the generated policy recording what it was generated from
// (the Helm chart checks them against its values).
const (
	PolicyAnnotation   = "nri-cni.io/nad-policy"
	MaxBytesAnnotation = "nri-cni.io/max-nad-config-bytes"
)

// AdmissionPolicy renders the ValidatingAdmissionPolicy and its binding
// (YAML, two documents) that judge, at CREATE and UPDATE of a
// NetworkAttachmentDefinition, what Policy.Check refuses on the node for p
// and maxConfigBytes (kubernetes.maxNADConfigBytes; 0: the default). The
// binding warns (DefaultMode) in every namespace unless opts say otherwise
// (WithMode, WithNamespaceSelector, WithObjectSelector).
//
// Kubernetes CEL has no JSON parser: the policy reads spec.config with
// regular expressions. That is exact because backslashes are refused first
// (a JSON string then holds no '"', so `"key"\s*:\s*"[^"]*"` captures a
// member exactly) and keys are matched with (?i), as encoding/json matches
// them. Where a rule needs the object a key belongs to (a bridge plugin
// must name its bridge; macvlan, ipvlan and vlan their master), the policy
// skips the members between "type" and that key only when their values
// nest at most MaxSkippedNesting deep, and it takes a "type" repeated after
// that key for one without it: there it is stricter than the node
// (docs/security.md; policytest lists the cases). It admits JSON
// that is malformed inside its outer braces, which the node refuses before
// any CNI call.
func AdmissionPolicy(p *config.NADPolicy, maxConfigBytes int, opts ...Option) ([]byte, error) {
	bind := binding{mode: DefaultMode}
	for _, o := range opts {
		if err := o(&bind); err != nil {
			return nil, err
		}
	}
	if maxConfigBytes == 0 {
		maxConfigBytes = config.DefaultMaxNADConfigBytes
	}
	p = p.Normalized()
	if _, err := New(p); err != nil {
		return nil, err
	}
	g := &gen{p: p, namespaces: p.SortedNamespaces()}
	vars, err := g.variables(maxConfigBytes)
	if err != nil {
		return nil, err
	}
	policyJSON, err := marshalCompact(p)
	if err != nil {
		return nil, err
	}
	if strings.Contains(string(policyJSON), "'") {
		return nil, fmt.Errorf("%s: a quote in the policy", config.NADPolicyKey) // validation allows none
	}
	var b strings.Builder
	writeVAP(&b, AdmissionPolicyName, string(policyJSON), quoteYAML(strconv.Itoa(maxConfigBytes)), vars, validations(), bind)
	return []byte(b.String()), nil
}

// marshalCompact is JSON without HTML escaping.
func marshalCompact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(b.Bytes()), nil
}

// quoteYAML: a JSON string is a YAML double-quoted scalar.
func quoteYAML(s string) string {
	b, _ := marshalCompact(s)
	return string(b)
}

type celVar struct{ Name, Comment, Expr string }

type validation struct{ Comment, Expr, MessageExpr, Message string }

// gen renders per-rule values as CEL conditionals on variables.rule.
type gen struct {
	p          *config.NADPolicy
	namespaces []string
}

// byRule is a CEL expression choosing f(rule) by variables.rule; only
// namespaces whose value differs from default's get a branch.
func (g *gen) byRule(f func(config.NADRule) (string, error)) (string, error) {
	def, err := f(*g.p.Default)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, ns := range g.namespaces {
		v, err := f(g.p.Namespaces[ns])
		if err != nil {
			return "", err
		}
		if v != def {
			fmt.Fprintf(&b, "variables.rule == '%s' ? %s :\n", ns, v)
		}
	}
	return b.String() + def, nil
}

// rawCEL is a CEL raw string literal: backslashes reach RE2 as written.
func rawCEL(s string) (string, error) {
	if strings.ContainsAny(s, "'\n") {
		return "", fmt.Errorf("cannot quote %q as a CEL raw string", s)
	}
	return "r'" + s + "'", nil
}

func strCEL(s string) (string, error) {
	if strings.ContainsAny(s, "'\\\n") {
		return "", fmt.Errorf("cannot quote %q as a CEL string", s)
	}
	return "'" + s + "'", nil
}

func (g *gen) variables(maxBytes int) ([]celVar, error) {
	rule := "''"
	if len(g.namespaces) > 0 {
		quoted := make([]string, len(g.namespaces))
		for i, ns := range g.namespaces {
			quoted[i] = "'" + ns + "'"
		}
		rule = fmt.Sprintf("request.namespace in [%s] ? request.namespace : ''", strings.Join(quoted, ", "))
	}
	vars := []celVar{
		{"config", "spec.config ('' when absent)", "has(object.spec) && has(object.spec.config) ? object.spec.config : ''"},
		{"empty", "all whitespace (Go's unicode.IsSpace): the node's confDir network of the NAD's name, never judged",
			`variables.config.matches(r'^[\t\n\v\f\r \x{85}\p{Z}]*$')`},
		// The CRD sets no maxLength (it is Multus's): configs of any size
		// reach the policy. The character count is free; only a config
		// that may fit is converted to count its bytes, and judge tests
		// the size before the empty check scans the config.
		{"tooBig", "larger than " + config.MaxNADConfigBytesKey + " (bytes, as the node counts; more characters is more bytes)",
			fmt.Sprintf("size(variables.config) > %d || size(bytes(variables.config)) > %d", maxBytes, maxBytes)},
		{"maxBytes", "", fmt.Sprintf("'%d'", maxBytes)},
		{"judge", "the rules below apply (the size first: an oversized config is never scanned)", "!variables.tooBig && !variables.empty"},
		{"rule", "'' = kubernetes.nadPolicy.default, else the namespace whose own rule applies", rule},
		{"ruleKey", "", "variables.rule == '' ? 'kubernetes.nadPolicy.default' : 'kubernetes.nadPolicy.namespaces.' + variables.rule"},
	}
	type param struct {
		name, comment string
		f             func(config.NADRule) (string, error)
	}
	text := func(list func(config.NADRule) []string) func(config.NADRule) (string, error) {
		return func(r config.NADRule) (string, error) { return strCEL(allowedText(list(r))) }
	}
	boolean := func(b func(config.NADRule) bool) func(config.NADRule) (string, error) {
		return func(r config.NADRule) (string, error) { return strconv.FormatBool(b(r)), nil }
	}
	params := []param{
		{"types", "allowed plugin types (a regular expression)", func(r config.NADRule) (string, error) { return rawCEL(literalsRe(r.Types)) }},
		{"typesText", "", text(func(r config.NADRule) []string { return r.Types })},
		{"bridges", "allowed bridge names", func(r config.NADRule) (string, error) { return rawCEL(patternsRe(r.Bridges)) }},
		{"bridgesText", "", text(func(r config.NADRule) []string { return r.Bridges })},
		{"masters", "allowed masters", func(r config.NADRule) (string, error) { return rawCEL(patternsRe(r.Masters)) }},
		{"mastersText", "", text(func(r config.NADRule) []string { return r.Masters })},
		{"devices", "allowed host devices", func(r config.NADRule) (string, error) { return rawCEL(patternsRe(r.Devices)) }},
		{"devicesText", "", text(func(r config.NADRule) []string { return r.Devices })},
		{"ranges", "allowed IPAM ranges", func(r config.NADRule) (string, error) {
			q := make([]string, len(r.IPAMRanges))
			for i, c := range r.IPAMRanges {
				s, err := strCEL(c)
				if err != nil {
					return "", err
				}
				q[i] = s
			}
			return "[" + strings.Join(q, ", ") + "]", nil
		}},
		{"rangesText", "", text(func(r config.NADRule) []string { return r.IPAMRanges })},
		{"paths", "allowed host paths: at or under a prefix", func(r config.NADRule) (string, error) { return rawCEL(pathsRe(r.Paths)) }},
		{"pathsText", "", text(func(r config.NADRule) []string { return r.Paths })},
		{"hostGateway", "", boolean(func(r config.NADRule) bool { return r.HostGateway })},
		{"runtimeConfig", "", boolean(func(r config.NADRule) bool { return r.RuntimeConfig })},
	}
	for _, p := range params {
		e, err := g.byRule(p.f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		vars = append(vars, celVar{p.name, p.comment, e})
	}
	return append(vars, matchVariables...), nil
}

// matchCondition: an UPDATE that leaves spec.config as it was is not judged
// (labels, annotations, finalizers of a NAD created before the policy stay
// editable); the node judges every config it reads anyway.
const matchCondition = `request.operation != 'UPDATE' ||
(has(object.spec) && has(object.spec.config) ? object.spec.config : '') !=
(has(oldObject.spec) && has(oldObject.spec.config) ? oldObject.spec.config : '')`
