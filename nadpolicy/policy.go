// Package nadpolicy enforces kubernetes.nadPolicy on the node: what a
// NetworkAttachmentDefinition's spec.config may reach (plugin types,
// bridges, uplinks, host devices, address ranges, host paths, gateway and
// NAT, runtimeConfig), per namespace, before any CNI call. It also renders
// the ValidatingAdmissionPolicy that gives the same answer at kubectl apply
// (AdmissionPolicy). Pure: no logging, no API client.
package nadpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/nri-cni/nri-cni/config"
)

// ErrRefused is wrapped by every *Violation.
var ErrRefused = errors.New("refused by the NetworkAttachmentDefinition policy")

// Violation is why a config is refused: the first offending key or value in
// document order.
type Violation struct {
	// Path is the JSON path of the offending key or value in spec.config
	// (e.g. "plugins[0].ipam.ranges[0][0].subnet"); "" is the whole config.
	Path string
	// Value is the offending value as JSON (or the offending key), "" if
	// none.
	Value string
	// Problem says what is wrong.
	Problem string
	// PolicyKey is the nri.conf key that refuses it, e.g.
	// "kubernetes.nadPolicy.namespaces.telco.bridges"; built-in rules name
	// "kubernetes.nadPolicy".
	PolicyKey string
	// Allowed is what that key allows ("" for built-in rules).
	Allowed string
}

func (v *Violation) Error() string {
	var b strings.Builder
	b.WriteString("spec.config")
	if v.Path != "" {
		if !strings.HasPrefix(v.Path, "[") {
			b.WriteByte('.')
		}
		b.WriteString(v.Path)
	}
	b.WriteString(": ")
	if v.Value != "" {
		b.WriteString(v.Value + " ")
	}
	b.WriteString(v.Problem + " (" + v.PolicyKey)
	if v.Allowed != "" {
		b.WriteString(", allowed: " + v.Allowed)
	}
	b.WriteString(")")
	return b.String()
}

// Unwrap makes errors.Is(err, ErrRefused) hold.
func (v *Violation) Unwrap() error { return ErrRefused }

// Policy is a compiled kubernetes.nadPolicy. It is immutable and safe for
// concurrent use.
type Policy struct {
	def        *rule
	namespaces map[string]*rule
}

// rule is one compiled NADRule.
type rule struct {
	key                       string // kubernetes.nadPolicy.default or ….namespaces.<ns>
	r                         config.NADRule
	types                     map[string]bool
	bridges, masters, devices *regexp.Regexp
	ranges                    []netip.Prefix
	paths                     *regexp.Regexp
}

// New compiles p (nil: the code default, config.DefaultNADPolicy). p must
// have passed config validation; New checks again and fails on what would
// not compile.
func New(p *config.NADPolicy) (*Policy, error) {
	p = p.Normalized()
	def, err := compile(config.NADPolicyKey+".default", *p.Default)
	if err != nil {
		return nil, err
	}
	out := &Policy{def: def, namespaces: map[string]*rule{}}
	for ns, r := range p.Namespaces {
		c, err := compile(config.NADPolicyKey+".namespaces."+ns, r)
		if err != nil {
			return nil, err
		}
		out.namespaces[ns] = c
	}
	return out, nil
}

// Default is the compiled code default (config.DefaultNADPolicy).
func Default() *Policy {
	p, err := New(nil)
	if err != nil {
		panic("nadpolicy: the code default does not compile: " + err.Error())
	}
	return p
}

func compile(key string, r config.NADRule) (*rule, error) {
	c := &rule{key: key, r: r, types: map[string]bool{}}
	for _, t := range r.Types {
		c.types[t] = true
	}
	var err error
	re := func(sub, expr string) *regexp.Regexp {
		x, e := regexp.Compile("^" + expr + "$")
		if e != nil && err == nil {
			err = fmt.Errorf("%s.%s: %w", key, sub, e)
		}
		return x
	}
	c.bridges = re("bridges", patternsRe(r.Bridges))
	c.masters = re("masters", patternsRe(r.Masters))
	c.devices = re("devices", patternsRe(r.Devices))
	c.paths = re("paths", pathsRe(r.Paths))
	for i, s := range r.IPAMRanges {
		pfx, e := netip.ParsePrefix(s)
		if e != nil {
			return nil, fmt.Errorf("%s.ipamRanges[%d]: %w", key, i, e)
		}
		c.ranges = append(c.ranges, pfx)
	}
	return c, err
}

// rule returns the rule of namespace ns.
func (p *Policy) rule(ns string) *rule {
	if r, ok := p.namespaces[ns]; ok {
		return r
	}
	return p.def
}

// Check judges a NAD's spec.config for a NAD in namespace ns: nil, or a
// *Violation naming the first offending key in document order. An empty
// (all-whitespace) config means the node's confDir network of the NAD's
// name and is never subject to the policy.
func (p *Policy) Check(namespace string, rawConfig []byte) error {
	if strings.TrimSpace(string(rawConfig)) == "" {
		return nil
	}
	builtin := func(problem string) error {
		return &Violation{Problem: problem, PolicyKey: config.NADPolicyKey}
	}
	// JSON escapes could spell a key or value the admission policy's
	// regular expressions cannot see ("\u0074ype"), so neither side
	// accepts them.
	if strings.Contains(string(rawConfig), `\`) {
		return builtin("contains a backslash: JSON escapes are refused, as the admission policy could not see through them")
	}
	doc, err := parse(rawConfig)
	if err != nil {
		return builtin("is not JSON: " + err.Error())
	}
	if doc.kind != kindObject {
		return builtin("is not a JSON object")
	}
	w := &walker{r: p.rule(namespace)}
	return w.value("", doc)
}

// CheckSize refuses a spec.config larger than maxBytes
// (kubernetes.maxNADConfigBytes), before it is parsed.
func CheckSize(rawConfig []byte, maxBytes int) error { return CheckSizeOf(len(rawConfig), maxBytes) }

// CheckSizeOf is CheckSize for a spec.config of size bytes, for a caller
// that kept only its start.
func CheckSizeOf(size, maxBytes int) error {
	if size <= maxBytes {
		return nil
	}
	return &Violation{Problem: fmt.Sprintf("is %d bytes, more than %d", size, maxBytes),
		PolicyKey: config.MaxNADConfigBytesKey, Allowed: fmt.Sprintf("%d bytes", maxBytes)}
}
