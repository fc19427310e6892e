package fleet

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// probeAccount is a bystander: another controller's ServiceAccount in
// kube-system. Its requests match the same FlowSchema as nri-cni's
// (kube-system-service-accounts: priority level workload-high, flows told
// apart by namespace), so they are the same flow: what the controllers
// running as kube-system ServiceAccounts meet.
const probeAccount = "fleet-bystander"

// Bystander is what another client saw while the fleet did something:
// the latency of its GETs of one pod, every 10 ms.
type Bystander struct {
	Requests, Throttled, Failed int
	P50, P99, Max               time.Duration
}

// bystander reads pod (of the fleet's namespace) every 10 ms as
// kube-system/probeAccount until stop is called.
func (f *Fleet) bystander(ctx context.Context, pod string) (stop func() Bystander, err error) {
	admin := f.admin
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: probeAccount, Namespace: SystemNamespace}}
	if _, err := admin.CoreV1().ServiceAccounts(SystemNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bystander ServiceAccount: %w", err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: probeAccount, Namespace: Namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	if _, err := admin.RbacV1().Roles(Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bystander Role: %w", err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: probeAccount, Namespace: Namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: probeAccount},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: probeAccount, Namespace: SystemNamespace}}}
	if _, err := admin.RbacV1().RoleBindings(Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bystander RoleBinding: %w", err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(SystemNamespace).CreateToken(ctx, probeAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("bystander token: %w", err)
	}
	rc := rest.AnonymousClientConfig(f.c.RESTConfig)
	rc.BearerToken, rc.QPS, rc.Burst = tr.Status.Token, 100, 100
	// Every 429 counted, none retried: what the bystander meets.
	counter := NewCounter()
	rc.Wrap(counter.Wrap)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("bystander client: %w", err)
	}
	if err := waitUntil(ctx, time.Minute, func() bool {
		_, err := client.CoreV1().Pods(Namespace).Get(ctx, pod, metav1.GetOptions{})
		return err == nil
	}, "the bystander's RBAC in effect"); err != nil {
		return nil, err
	}
	before := counter.Snapshot()
	pctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var lat []time.Duration
	failed := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			t0 := time.Now()
			_, err := client.CoreV1().Pods(Namespace).Get(pctx, pod, metav1.GetOptions{})
			mu.Lock()
			if err != nil && pctx.Err() == nil {
				failed++
			} else if err == nil {
				lat = append(lat, time.Since(t0))
			}
			mu.Unlock()
		}
	}()
	return func() Bystander {
		cancel()
		<-done
		d := counter.Snapshot().Sub(before).Sum(nil)
		mu.Lock()
		defer mu.Unlock()
		b := Bystander{Requests: int(d.Requests), Throttled: int(d.Throttled), Failed: failed}
		if len(lat) > 0 {
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.P50, b.P99, b.Max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
		}
		return b
	}, nil
}
