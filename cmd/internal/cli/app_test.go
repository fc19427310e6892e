package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

func runApp(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := &app{stdin: bytes.NewReader(nil), stdout: &stdout, stderr: &stderr,
		getenv: func(k string) string {
			if k == "PATH" {
				return "/usr/bin"
			}
			return env[k]
		}}
	code := a.run(context.Background(), args)
	return code, stdout.String(), stderr.String()
}

func TestCLI(t *testing.T) {
	dir := t.TempDir()
	badKey := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(badKey, []byte("confDir: /x\nnetwork: [a]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kube := filepath.Join(dir, "kube.conf")
	if err := os.WriteFile(kube, []byte("stateDir: "+filepath.Join(dir, "state")+"\nkubernetes: {nodeName: n1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mnp := filepath.Join(dir, "mnp.conf")
	if err := os.WriteFile(mnp, []byte("stateDir: "+filepath.Join(dir, "state")+"\nkubernetes: {multiNetworkPolicy: {enabled: true}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badVal := filepath.Join(dir, "badval.conf")
	if err := os.WriteFile(badVal, []byte("cniTimeout: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderrWant []string
	}{
		{"version", []string{"version"}, 0, "nri-cni ", nil},
		{"version says the build", []string{"version"}, 0, "(no Kubernetes mode (nri-cni-k8s has it))", nil},
		// This build links no API client: Kubernetes mode is nri-cni-k8s.
		{"kubernetes section", []string{"run", "--config", kube}, 1, "", []string{"no Kubernetes mode", "nri-cni-k8s"}},
		{"kubernetes.multiNetworkPolicy", []string{"run", "--config", mnp}, 1, "", []string{"no Kubernetes mode", "nri-cni-k8s"}},
		{"no args, not pre-launched", nil, 2, "", []string{"usage:"}},
		{"unknown command", []string{"frobnicate"}, 2, "", []string{`unknown command "frobnicate"`}},
		{"missing config", []string{"run", "--config", filepath.Join(dir, "nope.conf")}, 1, "", []string{"nope.conf", "no such file"}},
		{"unknown key", []string{"run", "--config", badKey}, 1, "", []string{"bad.conf", `unknown key "network"`}},
		{"bad value", []string{"run", "--config", badVal}, 1, "", []string{"badval.conf", "cniTimeout", `"soon"`}},
		{"bad idx", []string{"run", "--config", badKey, "--idx", "7"}, 1, "", []string{`--idx "7"`}},
		{"stray args", []string{"run", "extra"}, 1, "", []string{"unexpected arguments"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runApp(t, nil, tc.args...)
			assert.Equal(t, tc.code, code, "stderr: %s", stderr)
			assert.Contains(t, stdout, tc.stdout)
			for _, w := range tc.stderrWant {
				assert.Contains(t, stderr, w)
			}
		})
	}
}
