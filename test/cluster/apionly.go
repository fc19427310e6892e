package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nri-cni/nri-cni/test/harness"
)

// apiChoice is the kube-apiserver of a cluster StartAPIOnly started: its
// binary and version (another than Tools'), and whether
// MutatingAdmissionPolicy stays as the version has it by default.
type apiChoice struct {
	bin, version     string
	noMutatingPolicy bool
}

// APIOnlyOpts configures StartAPIOnly.
type APIOnlyOpts struct {
	// APIServer is the kube-apiserver binary and Version its version
	// (EnsureAPIServer's, or Tools' own); "" = Tools'.
	APIServer, Version string
	// Tools: etcd, and kubectl for Cluster.Kubectl (zero: EnsureTools).
	Tools Tools
	// MutatingAdmissionPolicy: before Kubernetes 1.36, serve it (its
	// feature gate and v1beta1 API, as an admin does for deploy/base-1.34);
	// false leaves it as the version has it (off before 1.36).
	MutatingAdmissionPolicy bool
}

// StartAPIOnly starts etcd and a kube-apiserver and nothing else — no
// node, runtime, controller-manager or scheduler: what admission tests need
// (policies, RBAC), on any version without building the other four
// commands at it. It touches nothing of the host's (no interface, cgroup or
// sysctl; loopback ports only); the kubernetes Service gets no endpoints
// (--endpoint-reconciler-type=none). Namespaces get no default
// ServiceAccount (no controller-manager): create one before a pod. Close
// stops both.
func StartAPIOnly(ctx context.Context, o APIOnlyOpts) (c *Cluster, err error) {
	if o.Tools.K8sDir == "" {
		if o.Tools, err = EnsureTools(ctx); err != nil {
			return nil, err
		}
	}
	c = &Cluster{NodeName: harness.RandomName("apionly-"), Tools: o.Tools, removeDir: true,
		// Never assigned here: only its endpoints would name it, and none
		// are written (documentation range, RFC 5737).
		NodeIP: net.IPv4(192, 0, 2, 10),
		api:    apiChoice{bin: o.APIServer, version: o.Version, noMutatingPolicy: !o.MutatingAdmissionPolicy}}
	if c.api.bin == "" {
		c.api.bin, c.api.version = o.Tools.bin("kube-apiserver"), o.Tools.Version
	}
	if c.Dir, err = os.MkdirTemp("", "k8sapi"); err != nil {
		return nil, fmt.Errorf("cluster dir: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close(context.WithoutCancel(ctx)))
			c = nil
		}
	}()
	procs, err := c.prepareControlPlane(false)
	if err != nil {
		return c, err
	}
	c.etcd, c.apiserver = procs[0], procs[1]
	for _, p := range procs[:2] {
		if err := p.start(); err != nil {
			return c, err
		}
	}
	return c, c.waitAPIServer(ctx, 2*time.Minute, c.etcd, c.apiserver)
}

// APIServerTools is the second kube-apiserver test/tools/install-k8s.sh
// builds alone (K8S_APISERVER_VERSION, v1.34.4 unless the environment picks
// another): its binary and version.
type APIServerTools struct {
	Bin, Version string
}

// EnsureAPIServer runs `test/tools/install-k8s.sh apiserver` (idempotent;
// cached outside the clone, ~5-8 minutes cold) and returns it.
func EnsureAPIServer(ctx context.Context) (APIServerTools, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(harness.RepoRoot(), "test/tools/install-k8s.sh"), "apiserver")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return APIServerTools{}, fmt.Errorf("test/tools/install-k8s.sh apiserver: %w\n%s", err, stderr.String())
	}
	var t APIServerTools
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if dir, ok := strings.CutPrefix(sc.Text(), "APISERVER_BIN_DIR="); ok {
			t.Bin = filepath.Join(dir, "kube-apiserver")
		}
		if v, ok := strings.CutPrefix(sc.Text(), "APISERVER_VERSION="); ok {
			t.Version = v
		}
	}
	if t.Bin == "" || t.Version == "" {
		return APIServerTools{}, fmt.Errorf("test/tools/install-k8s.sh apiserver printed no APISERVER_BIN_DIR or APISERVER_VERSION: %q", out)
	}
	return t, nil
}
