package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNADPolicyCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	telco := write("telco.conf", "kubernetes:\n  maxNADConfigBytes: 8192\n  nadPolicy:\n    default: {types: [bridge], bridges: ['nad-*']}\n"+
		"    namespaces: {telco: {types: [macvlan], masters: [ens2f0]}}\n")
	noKube := write("nokube.conf", "logLevel: debug\n")
	bad := write("bad.conf", "kubernetes: {nadPolicy: {default: {types: ['a/b']}}}\n")
	notCM := write("notcm.yaml", "kind: Secret\ndata: {}\n")
	shipped, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "base", "nad-policy.yaml"))
	require.NoError(t, err)

	for _, tc := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr []string
	}{
		{"per-namespace policy", []string{"nad-policy", "--config", telco}, 0,
			[]string{"kind: ValidatingAdmissionPolicy", "request.namespace in ['telco']", "r'(?:ens2f0)'", "> 8192", "kind: ValidatingAdmissionPolicyBinding"}, nil},
		{"deploy/base's ConfigMap", []string{"nad-policy", "--configmap", filepath.Join("..", "..", "..", "deploy", "base", "configmap.yaml")}, 0,
			[]string{string(shipped)}, nil},
		{"no kubernetes section", []string{"nad-policy", "--config", noKube}, 0, []string{"r'(?:bridge|macvlan|"}, []string{"no kubernetes section", "code default"}},
		{"invalid policy", []string{"nad-policy", "--config", bad}, 1, nil, []string{"kubernetes.nadPolicy.default.types[0]"}},
		{"not a ConfigMap", []string{"nad-policy", "--configmap", notCM}, 1, nil, []string{"notcm.yaml", "not a ConfigMap with a nri.conf key"}},
		{"stray args", []string{"nad-policy", "x"}, 1, nil, []string{"unexpected arguments"}},
		{"warn by default", []string{"nad-policy", "--config", telco}, 0, []string{"  validationActions: [Warn, Audit]\n", "# Mode warn"}, nil},
		{"deny, scoped", []string{"nad-policy", "--config", telco, "--mode", "deny",
			"--namespace-selector", "kubernetes.io/metadata.name notin (multus-nets)", "--object-selector", "team=a"}, 0,
			[]string{"  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      matchExpressions:\n" +
				`        - {key: "kubernetes.io/metadata.name", operator: NotIn, values: ["multus-nets"]}` + "\n" +
				"    objectSelector:\n      matchLabels:\n" + `        "team": "a"` + "\n"}, nil},
		{"unknown mode", []string{"nad-policy", "--config", telco, "--mode", "Deny"}, 1, nil, []string{`unknown admission mode "Deny": want one of warn, audit, deny`}},
		{"bad selector", []string{"nad-policy", "--config", telco, "--namespace-selector", "a in (b"}, 1, nil,
			[]string{"namespace selector: bad label selector", "unbalanced parentheses"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runApp(t, nil, tc.args...)
			assert.Equal(t, tc.code, code, "stderr: %s", stderr)
			for _, w := range tc.stdout {
				assert.Contains(t, stdout, w)
			}
			for _, w := range tc.stderr {
				assert.Contains(t, stderr, w)
			}
			if tc.code != 0 {
				assert.Empty(t, strings.TrimSpace(stdout))
			}
		})
	}
	code, stdout, _ := runApp(t, nil, "help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "nri-cni nad-policy [--config FILE | --configmap FILE] [--mode warn|audit|deny]")
}
