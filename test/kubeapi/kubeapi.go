// Package kubeapi tests nri-cni's deployment against a real API server (the
// cluster harness, test/cluster): the RBAC, the ValidatingAdmissionPolicy and
// the NAD CRD of deploy/base, used with the node-bound ServiceAccount token
// nri-cni's DaemonSet pods get; and the Helm chart deploy/helm/nri-cni
// (lint, template, install). The helpers here do not import "testing".
package kubeapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nri-cni/nri-cni/test/deploy"
)

// NodeNameExtra is the user-info extra key a ServiceAccount token bound to
// a pod on a node (or to the node) carries the node's name in.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// ChartDir is the Helm chart's directory.
func ChartDir() string { return filepath.Join(deploy.RepoRoot(), "deploy", "helm", "nri-cni") }

// EnsureHelm runs `test/tools/install.sh helm` (idempotent, cached outside
// the clone) and returns the helm binary's path.
func EnsureHelm(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(deploy.RepoRoot(), "test/tools/install.sh"), "helm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("test/tools/install.sh helm: %w\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if dir, ok := strings.CutPrefix(sc.Text(), "HELM_BIN_DIR="); ok {
			return filepath.Join(dir, "helm"), nil
		}
	}
	return "", fmt.Errorf("test/tools/install.sh helm printed no HELM_BIN_DIR: %q", out)
}

// TokenFor asks the API server (as admin) for a 10-minute token of
// ServiceAccount ns/sa. With pod non-nil the token is bound to that pod, as
// the kubelet's projected tokens are; the API server adds the pod's node to
// it (the node claim) when the pod is bound to one.
func TokenFor(ctx context.Context, admin kubernetes.Interface, ns, sa string, pod *corev1.Pod) (string, error) {
	seconds := int64(600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for serviceaccount %s/%s: %w", ns, sa, err)
	}
	return tr.Status.Token, nil
}

// AsToken is admin's REST config with the client certificate replaced by a
// bearer token (same server, same CA).
func AsToken(admin *rest.Config, token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = token
	return cfg
}

// WhoAmI is the API server's view of cfg's identity (SelfSubjectReview).
func WhoAmI(ctx context.Context, cfg *rest.Config) (authenticationv1.UserInfo, error) {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("client: %w", err)
	}
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("SelfSubjectReview: %w", err)
	}
	return r.Status.UserInfo, nil
}
