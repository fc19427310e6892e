// Package cluster runs a real single-node Kubernetes for the tests: etcd, a
// kube-apiserver, controller-manager and scheduler on loopback, and a kubelet
// on the harness's containerd or CRI-O (Opts.Runtime), with its node address
// on a dummy interface the cluster creates. Everything lives in a private
// directory and is undone on Close, including what the kubelet changes on
// the host. Like the harness, it does not import "testing" (make demo-k8s
// uses it too).
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/nri-cni/nri-cni/test/harness"
)

// Tools are the directories of the pinned Kubernetes binaries, printed by
// test/tools/install-k8s.sh.
type Tools struct {
	K8sDir         string // kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl
	EtcdDir        string // etcd
	CrictlDir      string // crictl
	RuncSeccompDir string // runc built with libseccomp
	// Version is the Kubernetes binaries' version (v1.37.2 unless the
	// environment's K8S_VERSION picked another, e.g. v1.34.4).
	Version string
}

// minor is Version's minor number (37 for v1.37.2; 0 if unknown).
func (t Tools) minor() int {
	v, err := version.ParseSemantic(t.Version)
	if err != nil {
		return 0
	}
	return int(v.Minor())
}

// EnsureTools runs test/tools/install-k8s.sh (idempotent; cached outside the
// clone, a cold build takes ~10 minutes) and returns the directories.
func EnsureTools(ctx context.Context) (Tools, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(harness.RepoRoot(), "test/tools/install-k8s.sh"), "all")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Tools{}, fmt.Errorf("test/tools/install-k8s.sh: %w\n%s", err, stderr.String())
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	t := Tools{K8sDir: env["K8S_BIN_DIR"], EtcdDir: env["ETCD_BIN_DIR"], CrictlDir: env["CRICTL_BIN_DIR"],
		RuncSeccompDir: env["RUNC_SECCOMP_BIN_DIR"], Version: env["K8S_VERSION"]}
	if t.K8sDir == "" || t.EtcdDir == "" || t.CrictlDir == "" || t.RuncSeccompDir == "" || t.Version == "" {
		return Tools{}, fmt.Errorf("test/tools/install-k8s.sh printed no tool dirs: %q", out)
	}
	return t, nil
}

func (t Tools) bin(name string) string {
	switch name {
	case "etcd":
		return filepath.Join(t.EtcdDir, name)
	case "crictl":
		return filepath.Join(t.CrictlDir, name)
	case "runc":
		return filepath.Join(t.RuncSeccompDir, name)
	}
	return filepath.Join(t.K8sDir, name)
}
