package nadpolicy

import (
	"regexp"
	"strings"
)

// The value regular expressions below are shared by the node's check and
// the ValidatingAdmissionPolicy, so a pattern means the same on both. They
// match the inside of a JSON string: with backslashes refused, a JSON
// string holds no '"', so `[^"]` is "any character".

// never matches nothing at all (an empty allow-list).
const never = `[^\x00-\x{10FFFF}]`

// cniNameRe is the CNI spec's network name rule.
const cniNameRe = `[a-zA-Z0-9][a-zA-Z0-9_.\-]*`

// cniNameText says cniNameRe in words (messages).
const cniNameText = "letters, digits, _ . - starting with a letter or digit"

// patternsRe turns interface-name patterns ('*': any run, '?': one
// character) into an alternation.
func patternsRe(patterns []string) string {
	if len(patterns) == 0 {
		return never
	}
	alts := make([]string, len(patterns))
	for i, p := range patterns {
		var b strings.Builder
		for _, r := range p {
			switch r {
			case '*':
				b.WriteString(`[^"]*`)
			case '?':
				b.WriteString(`[^"]`)
			default:
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		alts[i] = b.String()
	}
	return "(?:" + strings.Join(alts, "|") + ")"
}

// literalsRe is an alternation of exact strings (plugin types).
func literalsRe(words []string) string {
	if len(words) == 0 {
		return never
	}
	alts := make([]string, len(words))
	for i, w := range words {
		alts[i] = regexp.QuoteMeta(w)
	}
	return "(?:" + strings.Join(alts, "|") + ")"
}

// pathsRe matches a path at or under one of the prefixes.
func pathsRe(prefixes []string) string {
	return literalsRe(prefixes) + `(?:/[^"]*)?`
}

// anchored compiles re to match a whole string value.
func anchored(re string) *regexp.Regexp { return regexp.MustCompile("^" + re + "$") }

// allowedText lists an allow-list for messages.
func allowedText(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}
