package fleet

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
)

// Names the fleet uses on the API server.
const (
	// Namespace holds the fleet's NADs and workload pods.
	Namespace = "fleet"
	// SystemNamespace and the ServiceAccounts: deploy/base's nri-cni, and
	// Multus thick's (multus, as its daemonset manifest names it).
	SystemNamespace = "kube-system"
	NRICNIAccount   = "nri-cni"
	MultusAccount   = "multus"
	// nodeLabel marks the fleet's Node objects.
	nodeLabel = "nri-cni.io/fleet"
)

// deployment is what Prepare applied: nri.conf and its networks as
// deploy/base's ConfigMap has them.
type deployment struct {
	config   config.Config
	networks map[string]string // file name → CNI config
}

// prepare applies deploy/base without its DaemonSet, and deploy/hotplug,
// with kubectl (the agents are its DaemonSet's pods, simulated); creates
// the fleet's namespace and nads NADs (each a bridge and host-local config
// deploy/base's NAD policy allows); and the Multus pattern's identity.
func prepare(ctx context.Context, c *cluster.Cluster, nads int) (*deployment, error) {
	b, err := deploy.LoadBase(deploy.RepoRoot())
	if err != nil {
		return nil, err
	}
	args := []string{"apply"}
	for _, r := range b.Kustomization.Resources {
		if r != "daemonset.yaml" {
			args = append(args, "-f", filepath.Join(b.Dir, r))
		}
	}
	if _, err := c.Kubectl(ctx, args...); err != nil {
		return nil, fmt.Errorf("applying deploy/base: %w", err)
	}
	if _, err := c.Kubectl(ctx, "apply", "-k", filepath.Join(deploy.RepoRoot(), "deploy", "hotplug")); err != nil {
		return nil, fmt.Errorf("applying deploy/hotplug: %w", err)
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=2m", "crd/"+b.CRD.Name); err != nil {
		return nil, fmt.Errorf("NAD CRD: %w", err)
	}
	d := &deployment{networks: map[string]string{}}
	for k, v := range b.ConfigMap.Data {
		if k == deploy.ConfigKey {
			if d.config, err = config.Parse([]byte(v)); err != nil {
				return nil, fmt.Errorf("deploy/base's nri.conf: %w", err)
			}
			continue
		}
		d.networks[k] = v
	}
	if d.config.Kubernetes == nil {
		return nil, fmt.Errorf("deploy/base's nri.conf has no kubernetes section")
	}
	admin := c.Client
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("namespace %s: %w", Namespace, err)
	}
	if err := waitServiceAccount(ctx, admin, Namespace, "default"); err != nil {
		return nil, err
	}
	nc, err := nadclient.NewForConfig(c.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("NAD client: %w", err)
	}
	for i := range nads {
		if _, err := nc.K8sCniCncfIoV1().NetworkAttachmentDefinitions(Namespace).Create(ctx, NAD(i, 0), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("NAD %d: %w", i, err)
		}
	}
	if err := multusIdentity(ctx, admin); err != nil {
		return nil, err
	}
	return d, nil
}

// NAD is the fleet's i-th NetworkAttachmentDefinition, at revision rev (a
// changed MTU: what an admin's edit of a network looks like).
func NAD(i, rev int) *nadv1.NetworkAttachmentDefinition {
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"nad-%02d","plugins":[{"type":"bridge","bridge":"nad-%02d","mtu":%d,`+
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.251.%d.0/24"}]]}},{"type":"tuning","capabilities":{"mac":true}}]}`,
		i, i, 1500-rev, i%256)
	return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: NADName(i), Namespace: Namespace},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: conf}}
}

// NADName is the i-th NAD's name.
func NADName(i int) string { return fmt.Sprintf("net-%02d", i) }

// multusIdentity is Multus thick's ServiceAccount and what its daemonset
// manifest grants it that the pattern uses (pods get, list, watch; their
// status updated; events created).
func multusIdentity(ctx context.Context, admin kubernetes.Interface) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: MultusAccount, Namespace: SystemNamespace}}
	if _, err := admin.CoreV1().ServiceAccounts(SystemNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("multus ServiceAccount: %w", err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-multus"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"get", "list", "watch", "update"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"*"}, Verbs: []string{"*"}},
	}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("multus ClusterRole: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-multus"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: MultusAccount, Namespace: SystemNamespace}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("multus ClusterRoleBinding: %w", err)
	}
	return nil
}

func waitServiceAccount(ctx context.Context, admin kubernetes.Interface, ns, name string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serviceaccount %s/%s: %w", ns, name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// createNode creates the Node object name (no kubelet ever reports on it).
func createNode(ctx context.Context, admin kubernetes.Interface, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{nodeLabel: "true"}}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("node %s: %w", name, err)
	}
	return nil
}

// daemonToken is what the kubelet mounts into a DaemonSet pod of
// ServiceAccount sa on node: a token bound to a pod bound to the node (the
// pod is created here and never runs), so the API server adds the node
// claim the admission policies check. Valid for 2 hours.
func daemonToken(ctx context.Context, admin kubernetes.Interface, sa, node string) (string, error) {
	name := strings.ReplaceAll(sa, "-", "") + "-" + node
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: SystemNamespace, Labels: map[string]string{"app": sa}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, HostNetwork: true,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: sa, Image: "localhost/" + sa + ":dev"}}}}
	p, err := admin.CoreV1().Pods(SystemNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		p, err = admin.CoreV1().Pods(SystemNamespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("daemon pod %s/%s: %w", SystemNamespace, name, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](7200),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}
	tr, err := admin.CoreV1().ServiceAccounts(SystemNamespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s/%s bound to pod %s: %w", SystemNamespace, sa, name, err)
	}
	return tr.Status.Token, nil
}
