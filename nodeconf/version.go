package nodeconf

import (
	"fmt"
	"strconv"
	"strings"
)

// The first releases whose NRI has the default validator with required
// plugins: containerd 2.2.0 (nri v0.10.0; 2.1 vendors v0.8.0) and CRI-O
// 1.34.0 (nri v0.10.0 and its [crio.nri.default_validator] table; 1.33 has
// neither).
var minVersion = map[string][3]int{
	RuntimeContainerd: {2, 2, 0},
	RuntimeCRIO:       {1, 34, 0},
}

// CheckVersion judges a runtime's version as NRI reports it ("v2.4.2",
// "2.1.0", "1.36.3", "2.4.2+unknown"): a finding when it predates the
// default validator or cannot be read. An empty version, or a runtime
// nodeconf does not know, yields nothing (Check reports the latter).
func CheckVersion(runtime, version string) []Finding {
	runtime = NormalizeRuntime(runtime)
	want, known := minVersion[runtime]
	if version == "" || !known {
		return nil
	}
	wantText := fmt.Sprintf("%d.%d", want[0], want[1])
	got, ok := parseVersion(version)
	if !ok {
		return []Finding{{
			Problem: fmt.Sprintf("%s reports version %q: nri-cni cannot tell whether it has NRI's default validator (%s %s or later)",
				runtime, version, runtime, wantText),
			Fix: fmt.Sprintf("check the %s version on the node; fail-closed pods need %s or later", runtime, wantText),
		}}
	}
	if compare(got, want) >= 0 {
		return nil
	}
	return []Finding{{
		Problem: fmt.Sprintf("%s %s has no NRI default validator (%s or later): the required-plugins annotation does nothing "+
			"and pods start without waiting for nri-cni", runtime, version, wantText),
		Fix: fmt.Sprintf("upgrade %s to %s or later", runtime, wantText),
	}}
}

// parseVersion reads MAJOR.MINOR[.PATCH] with an optional leading "v" and
// any suffix after '+', '-' or '~' ignored.
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(v, "+-~ "); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

func compare(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}
