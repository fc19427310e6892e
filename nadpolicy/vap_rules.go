package nadpolicy

import (
	"strconv"
	"strings"
)

// The CEL below reads spec.config with RE2 (Kubernetes' regex library:
// matches, find, findAll) once backslashes are refused. In valid JSON
// without escapes every '"' opens or closes a string, so:
//   - `(?i:"type")\s*:\s*(?:"[^"]*"|.)` finds every member named type (any
//     case) with its string value, or the first character of another kind
//     of value (which then fails the string check);
//   - `"/[^"]*"` finds every string starting with "/" (a '"' followed by
//     '/' cannot be a closing quote);
//   - sameObject between two members stays in one object at one level.

// inside is a CEL condition: string s is an IP in, or a CIDR inside, one of
// variables.ranges (the node's rule.inside, with the same net/netip parsing).
const inside = `(isCIDR(s) && variables.ranges.exists(r, cidr(r).containsCIDR(s))) ||
  (isIP(s) && variables.ranges.exists(r, cidr(r).containsIP(s)))`

// showMember renders a `"key" : value` match m as `"key": value`.
const showMember = `m.substring(0, m.indexOf('"', 1) + 1) + ': ' + m.substring(m.indexOf(':', m.indexOf('"', 1)) + 1).trim()`

// matchVariables are the offending matches of each rule (lists, empty when
// the rule holds); they are evaluated only when a validation needs them.
var matchVariables = []celVar{
	{"badNames", "every \"name\" is a CNI network name", `variables.config.findAll(r'(?i:"name")\s*:\s*(?:"[^"]*"|.)')
.filter(m, !m.matches(r'^(?i:"name")\s*:\s*"` + cniNameRe + `"$'))`},
	{"badTypes", "every \"type\" is an allowed plugin type", `variables.config.findAll(r'(?i:"type")\s*:\s*(?:"[^"]*"|.)')
.filter(m, !m.matches(r'^(?i:"type")\s*:\s*"' + variables.types + r'"$'))`},
	{"badBridges", "every \"bridge\" is an allowed bridge", ifnameRule("bridge", "bridges")},
	{"unnamedBridges", "a \"type\": \"bridge\" without a \"bridge\" in its object", unnamedRule(`bridge`, "bridge")},
	{"badMasters", "every \"master\" is an allowed master", ifnameRule("master", "masters")},
	{"unnamedMasters", "a macvlan, ipvlan or vlan plugin without a \"master\" in its object",
		unnamedRule(`(?:macvlan|ipvlan|vlan)`, "master")},
	{"deviceSelectors", "host devices chosen other than by name (a boolean, as in \"capabilities\", chooses none)",
		`variables.config.findAll(r'(?i:"(?:pciBusID|hwaddr|kernelpath|deviceID)")\s*:\s*(?:"[^"]*"|.)')
.filter(m, !m.matches(r':\s*[tf]$'))`},
	{"badDevices", "every \"device\" is an allowed device", ifnameRule("device", "devices")},
	{"badIPAM", "every address value is an IP or CIDR inside the ranges",
		`variables.config.findAll(r'(?i:"(?:subnet|range|rangeStart|rangeEnd|range_start|range_end|gateway|address)")\s*:\s*(?:"[^"]*"|.)')
.filter(m, ![m.substring(m.indexOf(':') + 1).trim()].all(v, v.matches(r'^"[^"]*"$') &&
  [v.substring(1, size(v) - 1)].all(s, ` + inside + `)))`},
	{"badIPs", "every \"ips\" is a list of IPs or CIDRs inside the ranges",
		`variables.config.findAll(r'(?i:"ips")\s*:\s*(?:\[[^\[\]{}]*\]|.)')
.filter(m, !(m.matches(r'\[\s*(?:"[^"]*"\s*(?:,\s*"[^"]*"\s*)*)?\]$') &&
  m.substring(m.indexOf('[')).findAll(r'"[^"]*"').all(e, [e.substring(1, size(e) - 1)].all(s, ` + inside + `))))`},
	{"badPathKeys", "keys ending in dir, path, file or socket hold an absolute path (or a boolean, as in \"capabilities\")",
		`variables.config.findAll(r'(?i)"[^"]*(?:dir|path|file|socket)"\s*:\s*(?:"[^"]*"|.)')
.filter(m, !m.matches(r'^"[^"]*"\s*:\s*"/[^"]*"$') && !m.matches(r':\s*[tf]$'))`},
	{"badPaths", "every string starting with / is at or under an allowed prefix",
		`variables.config.findAll(r'"/[^"]*"').filter(m, !m.matches(r'^"' + variables.paths + r'"$'))`},
	{"dotDot", "strings with a .. path segment", `variables.config.findAll(r'"(?:[^"]*/)?\.\.(?:/[^"]*)?"')`},
}

func ifnameRule(key, param string) string {
	return `variables.config.findAll(r'(?i:"` + key + `")\s*:\s*(?:"[^"]*"|.)')
.filter(m, m.matches(r'""$') || !m.matches(r'^(?i:"` + key + `")\s*:\s*"' + variables.` + param + ` + r'"$'))`
}

// MaxSkippedNesting is how deep the values between a plugin's "type" and its
// "bridge" or "master" may nest for the admission policy to see that both
// are members of one object (an "ipam" with host-local ranges is 4 deep:
// object, list, list, object). Deeper, the policy refuses where the node
// does not.
const MaxSkippedNesting = 6

// nestedRe matches one complete JSON object or list nested at most depth
// levels, strings atomic (they may hold brackets).
func nestedRe(depth int) string {
	inner := `(?:[^{}\[\]"]|"[^"]*")`
	re := ""
	for i := 0; i < depth; i++ {
		re = `[\[{]` + inner + `*[\]}]`
		inner = `(?:[^{}\[\]"]|"[^"]*"|` + re + `)`
	}
	return re
}

// sameObject is what may stand between two members of one object: other
// members, with values nested at most MaxSkippedNesting deep. It never
// holds an unbalanced bracket, so it never leaves the object.
var sameObject = `(?:[^{}\[\]"]|"[^"]*"|` + nestedRe(MaxSkippedNesting) + `)*`

// unnamedRule: each "type": "<types>" must have "<key>": "<non-empty>" in
// the same object, before or after it.
func unnamedRule(types, key string) string {
	k := `(?i:"` + key + `")\s*:\s*"[^"]+"`
	t := `(?i:"type")\s*:\s*"` + types + `"`
	return `variables.config.findAll(r'` + k + sameObject + t + `|` + t + `(?:` + sameObject + k + `)?')
.filter(m, !m.matches(r'^(?i:"` + key + `")') && !m.matches(r'` + k + `$'))`
}

// check is a validation that fails when list variable v is not empty;
// message renders its first element with show (a CEL expression of m).
func check(comment, v, show, problem, param, allowedVar string) validation {
	allowed := ""
	if allowedVar != "" {
		allowed = " + ', allowed: ' + variables." + allowedVar
	}
	return validation{
		Comment: comment,
		Expr:    "!variables.judge || size(variables." + v + ") == 0",
		MessageExpr: "'spec.config: ' + [variables." + v + "[0]].map(m, " + show + ")[0] + ' " + problem +
			" (' + variables.ruleKey + '." + param + "'" + allowed + " + ')'",
		Message: "spec.config: " + strings.ReplaceAll(problem, `\"`, `"`) + " (kubernetes.nadPolicy.<rule>." + param + ")",
	}
}

func validations() []validation {
	builtin := func(comment, expr, problem string) validation {
		return validation{Comment: comment, Expr: expr, Message: "spec.config: " + problem + " (kubernetes.nadPolicy)"}
	}
	return judgedMessages([]validation{
		{Comment: "kubernetes.maxNADConfigBytes (whitespace or not: the node checks the size first)", Expr: "!variables.tooBig",
			MessageExpr: "'spec.config: is ' + string(size(bytes(variables.config))) + ' bytes, more than ' + variables.maxBytes + ' (kubernetes.maxNADConfigBytes)'",
			Message:     "spec.config is larger than kubernetes.maxNADConfigBytes"},
		builtin("no JSON escapes (they could spell a key these expressions cannot see)",
			`!variables.judge || !variables.config.contains('\\')`,
			"contains a backslash: JSON escapes are refused, as the admission policy could not see through them"),
		builtin("a JSON object", `!variables.judge || variables.config.matches(r'^[ \t\n\r]*\{[\s\S]*\}[ \t\n\r]*$')`,
			"is not a JSON object"),
		{Comment: "CNI network names", Expr: "!variables.judge || size(variables.badNames) == 0",
			MessageExpr: "'spec.config: ' + [variables.badNames[0]].map(m, " + showMember + ")[0] + ' is not a valid CNI network name: " +
				cniNameText + " (kubernetes.nadPolicy)'",
			Message: "spec.config: a \"name\" is not a valid CNI network name (kubernetes.nadPolicy)"},
		check("types", "badTypes", showMember, "is not an allowed plugin type", "types", "typesText"),
		check("bridges", "badBridges", showMember, "is not an allowed bridge", "bridges", "bridgesText"),
		check("bridges: a bridge plugin names its bridge", "unnamedBridges", `'"type": "bridge"'`,
			`names no \"bridge\": a bridge plugin must name its bridge (its default is cni0; between \"type\" and \"bridge\" this policy skips values nested up to `+strconv.Itoa(MaxSkippedNesting)+` deep)`,
			"bridges", "bridgesText"),
		check("masters", "badMasters", showMember, "is not an allowed master", "masters", "mastersText"),
		check("masters: macvlan, ipvlan and vlan name their master", "unnamedMasters", `'"type": ' + m.find(r'"(?:macvlan|ipvlan|vlan)"')`,
			`names no \"master\": macvlan, ipvlan and vlan must name their master (their default is the default-route interface of the node; between \"type\" and \"master\" this policy skips values nested up to `+strconv.Itoa(MaxSkippedNesting)+` deep)`,
			"masters", "mastersText"),
		check("devices: no pciBusID, hwaddr, kernelpath, deviceID", "deviceSelectors", showMember,
			"selects a host device other than by name: refused", "devices", "devicesText"),
		check("devices", "badDevices", showMember, "is not an allowed device", "devices", "devicesText"),
		check("ipamRanges", "badIPAM", showMember, "is not an IP or CIDR inside the allowed ranges", "ipamRanges", "rangesText"),
		check("ipamRanges: ips lists", "badIPs", showMember, "must be a list of IPs or CIDRs inside the allowed ranges", "ipamRanges", "rangesText"),
		{Comment: "hostGateway", Expr: `!variables.judge || variables.hostGateway || !variables.config.matches(` + hostGatewayRe + `)`,
			MessageExpr: `'spec.config: ' + [variables.config.find(` + hostGatewayRe + `)].map(m, m.substring(0, m.indexOf('"', 1) + 1))[0] + ': true puts the host on the network as its gateway or adds NAT rules on the host: refused (' + variables.ruleKey + '.hostGateway, allowed: false)'`,
			Message:     "spec.config: isGateway, isDefaultGateway or ipMasq true: refused (kubernetes.nadPolicy.<rule>.hostGateway)"},
		{Comment: "runtimeConfig", Expr: `!variables.judge || variables.runtimeConfig || !variables.config.matches(r'(?i:"runtimeConfig")\s*:')`,
			MessageExpr: `'spec.config: "runtimeConfig" is refused: a static runtimeConfig bypasses podCapabilities (' + variables.ruleKey + '.runtimeConfig, allowed: false)'`,
			Message:     "spec.config: runtimeConfig is refused (kubernetes.nadPolicy.<rule>.runtimeConfig)"},
		check("paths: keys naming files hold absolute paths", "badPathKeys", showMember, "must be an absolute host path", "paths", "pathsText"),
		check("paths", "badPaths", "m", "is a host path outside the allowed prefixes", "paths", "pathsText"),
		check("paths: no .. segments", "dotDot", "m", `has a \"..\" path segment: always refused`, "paths", "pathsText"),
	})
}

// judgedMessages computes the message of a rule that applies only when
// variables.judge only then. When one validation fails, the API server
// evaluates every messageExpression of the policy (k8s.io/apiserver's
// validator), each with the variables it names: a rule's message reads its
// offending matches, regular expressions over the whole config. The CRD
// sets no maxLength (it is Multus's), so a config of a MiB reaches the
// policy; refused by the size rule, its other messages ran out of the API
// server's CEL budget and the refusal said so instead of naming the size.
func judgedMessages(vals []validation) []validation {
	for i, v := range vals {
		if v.MessageExpr != "" && strings.HasPrefix(v.Expr, "!variables.judge ||") {
			vals[i].MessageExpr = "variables.judge ? (" + v.MessageExpr + ") : ''"
		}
	}
	return vals
}

const hostGatewayRe = `r'(?i:"(?:isGateway|isDefaultGateway|ipMasq)")\s*:\s*true'`

// indent prefixes every line of s with n spaces.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// writeVAP renders the policy and its binding. Plain string building, not
// text/template: a template's reflective method calls make the linker keep
// every exported method of every type in the binary (33 MB became 61 MB).
func writeVAP(b *strings.Builder, name, policyJSON, maxBytes string, vars []celVar, vals []validation, bind binding) {
	w := func(lines ...string) {
		for _, l := range lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	w(`# Generated from kubernetes.nadPolicy and kubernetes.maxNADConfigBytes (nri.conf)`,
		"# by `nri-cni nad-policy --config nri.conf` (or --configmap FILE): do not edit;",
		`# change the policy and regenerate. It judges at kubectl apply what nri-cni`,
		`# refuses on the node (docs/security.md); the binding (below) warns or`,
		`# refuses. NetworkAttachmentDefinitions with an empty spec.config are never`,
		`# judged.`,
		`apiVersion: admissionregistration.k8s.io/v1`,
		`kind: ValidatingAdmissionPolicy`,
		`metadata:`,
		`  name: `+name,
		`  annotations:`,
		`    nri-cni.io/nad-policy: '`+policyJSON+`'`,
		`    nri-cni.io/max-nad-config-bytes: `+maxBytes,
		`spec:`,
		`  failurePolicy: Fail`,
		`  matchConstraints:`,
		`    resourceRules:`,
		`      - apiGroups: ["k8s.cni.cncf.io"]`,
		`        apiVersions: ["*"]`,
		`        operations: ["CREATE", "UPDATE"]`,
		`        resources: ["network-attachment-definitions"]`,
		`  matchConditions:`,
		`    # An UPDATE that leaves spec.config as it was is not judged.`,
		`    - name: config-changed`,
		`      expression: |-`,
		indent(8, matchCondition),
		`  variables:`)
	for _, v := range vars {
		if v.Comment != "" {
			w(`    # ` + v.Comment)
		}
		w(`    - name: `+v.Name, `      expression: |-`, indent(8, v.Expr))
	}
	w(`  validations:`)
	for _, v := range vals {
		w(`    # `+v.Comment, `    - expression: |-`, indent(8, v.Expr))
		if v.MessageExpr != "" {
			w(`      messageExpression: |-`, indent(8, v.MessageExpr))
		}
		w(`      message: `+quoteYAML(v.Message), `      reason: Forbidden`)
	}
	w(`---`)
	writeBinding(w, name, bind)
}
