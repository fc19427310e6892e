package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// ServiceCIDR is the cluster's service-cluster-ip-range.
const ServiceCIDR = "10.96.0.0/24"

// procEnv is the environment of every component: a plain PATH (the kubelet
// runs mount, umount, iptables) and nothing inherited from the test.
var procEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// certs are the files of the cluster's PKI.
type certs struct {
	etcd, etcdClient, apiserver, kubeletClient pair
	admin, controllerManager, scheduler, node  pair
	saKey, saPub                               string
}

// makePKI issues every certificate and key the components use and writes
// their kubeconfigs (admin.conf, controller-manager.conf, scheduler.conf,
// kubelet.conf) into c.Dir.
func (c *Cluster) makePKI() (certs, error) {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return certs{}, err
	}
	c.pki = p
	loop := net.IPv4(127, 0, 0, 1)
	svcIP := net.IPv4(10, 96, 0, 1)
	var cs certs
	specs := []struct {
		dst  *pair
		spec certSpec
	}{
		{&cs.etcd, certSpec{name: "etcd", cn: "etcd", server: true, ips: []net.IP{loop}, dns: []string{"localhost"}}},
		{&cs.etcdClient, certSpec{name: "apiserver-etcd-client", cn: "kube-apiserver-etcd-client"}},
		{&cs.apiserver, certSpec{name: "apiserver", cn: "kube-apiserver", server: true,
			ips: []net.IP{loop, c.NodeIP, svcIP},
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"}}},
		{&cs.kubeletClient, certSpec{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client",
			orgs: []string{"system:masters"}}},
		{&cs.admin, certSpec{name: "admin", cn: "kubernetes-admin", orgs: []string{"system:masters"}}},
		{&cs.controllerManager, certSpec{name: "controller-manager", cn: "system:kube-controller-manager"}},
		{&cs.scheduler, certSpec{name: "scheduler", cn: "system:kube-scheduler"}},
		{&cs.node, certSpec{name: "kubelet", cn: "system:node:" + c.NodeName, orgs: []string{"system:nodes"}}},
	}
	for _, s := range specs {
		if *s.dst, err = p.issue(s.spec); err != nil {
			return certs{}, err
		}
	}
	if cs.saKey, cs.saPub, err = p.serviceAccountKeys(); err != nil {
		return certs{}, err
	}
	for _, k := range []struct {
		file, user string
		pair       pair
	}{
		{"admin.conf", "kubernetes-admin", cs.admin},
		{"controller-manager.conf", "system:kube-controller-manager", cs.controllerManager},
		{"scheduler.conf", "system:kube-scheduler", cs.scheduler},
		{"kubelet.conf", "system:node:" + c.NodeName, cs.node},
	} {
		if err := p.kubeconfig(filepath.Join(c.Dir, k.file), c.APIServerURL, k.user, k.pair); err != nil {
			return certs{}, err
		}
	}
	c.Kubeconfig = filepath.Join(c.Dir, "admin.conf")
	return cs, nil
}

// auditPolicy logs every request at Metadata level, once (ResponseComplete).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
`

// controlPlaneProcs prepares etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler (not started).
func (c *Cluster) controlPlaneProcs(cs certs, audit bool) ([]*proc, error) {
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	etcdURL := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "https://127.0.0.1:" + strconv.Itoa(ports[1])
	etcd := newProc(c.Dir, "etcd", c.Tools.bin("etcd"), procEnv,
		"--name=default", "--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--initial-cluster-state=new",
		"--cert-file="+cs.etcd.Cert, "--key-file="+cs.etcd.Key, "--trusted-ca-file="+c.pki.CA, "--client-cert-auth",
		"--peer-cert-file="+cs.etcd.Cert, "--peer-key-file="+cs.etcd.Key, "--peer-trusted-ca-file="+c.pki.CA,
		"--peer-client-cert-auth", "--log-level=warn")

	apiArgs := []string{
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(c.apiPort),
		"--advertise-address=" + c.NodeIP.String(),
		"--etcd-servers=" + etcdURL, "--etcd-cafile=" + c.pki.CA,
		"--etcd-certfile=" + cs.etcdClient.Cert, "--etcd-keyfile=" + cs.etcdClient.Key,
		"--tls-cert-file=" + cs.apiserver.Cert, "--tls-private-key-file=" + cs.apiserver.Key,
		"--client-ca-file=" + c.pki.CA,
		"--kubelet-client-certificate=" + cs.kubeletClient.Cert, "--kubelet-client-key=" + cs.kubeletClient.Key,
		// logs, exec: dial the node's address, never resolve its name (DNS would leave the machine).
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file=" + cs.saPub, "--service-account-signing-key-file=" + cs.saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--anonymous-auth=false", "--profiling=false",
		"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
	}
	bin, minor := c.Tools.bin("kube-apiserver"), c.Tools.minor()
	if c.api.bin != "" { // StartAPIOnly's own kube-apiserver
		bin, minor = c.api.bin, Tools{Version: c.api.version}.minor()
		apiArgs = append(apiArgs, "--endpoint-reconciler-type=none")
	}
	if !c.api.noMutatingPolicy {
		apiArgs = append(apiArgs, mutatingPolicyFlags(minor)...)
	}
	if audit {
		policy := filepath.Join(c.Dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
			return nil, fmt.Errorf("audit policy: %w", err)
		}
		c.AuditLog = filepath.Join(c.Dir, "audit.log")
		apiArgs = append(apiArgs, "--audit-policy-file="+policy, "--audit-log-path="+c.AuditLog,
			"--audit-log-format=json", "--audit-log-maxbackup=0", "--audit-log-mode=blocking")
	}
	apiserver := newProc(c.Dir, "kube-apiserver", bin, procEnv, apiArgs...)

	cmConf := filepath.Join(c.Dir, "controller-manager.conf")
	cm := newProc(c.Dir, "kube-controller-manager", c.Tools.bin("kube-controller-manager"), procEnv,
		"--kubeconfig="+cmConf, "--authentication-kubeconfig="+cmConf, "--authorization-kubeconfig="+cmConf,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--cert-dir="+filepath.Join(c.Dir, "controller-manager-certs"),
		"--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file="+cs.saKey, "--root-ca-file="+c.pki.CA,
		"--cluster-signing-cert-file="+c.pki.CA, "--cluster-signing-key-file="+c.pki.CAKey,
		"--service-cluster-ip-range="+ServiceCIDR,
		"--flex-volume-plugin-dir="+filepath.Join(c.Dir, "flexvolume"))

	schedConf := filepath.Join(c.Dir, "scheduler.conf")
	sched := newProc(c.Dir, "kube-scheduler", c.Tools.bin("kube-scheduler"), procEnv,
		"--kubeconfig="+schedConf, "--authentication-kubeconfig="+schedConf, "--authorization-kubeconfig="+schedConf,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[3]),
		"--cert-dir="+filepath.Join(c.Dir, "scheduler-certs"), "--leader-elect=false")
	c.kubeletPort = ports[4]
	return []*proc{etcd, apiserver, cm, sched}, nil
}

// mutatingPolicyFlags are the kube-apiserver flags that serve
// MutatingAdmissionPolicy (deploy/base's required-plugins policy) on an API
// server of the given minor version: none from 1.36 (admissionregistration.k8s.io/v1,
// on by default) or when the version is unknown (0); before, the v1beta1 API
// behind its feature gate (off by default in 1.34 and 1.35), as a cluster
// admin turns it on for deploy/base-1.34.
func mutatingPolicyFlags(minor int) []string {
	if minor == 0 || minor >= 36 {
		return nil
	}
	return []string{"--feature-gates=MutatingAdmissionPolicy=true",
		"--runtime-config=admissionregistration.k8s.io/v1beta1=true"}
}

// waitAPIServer waits until /readyz answers ok (or a component exited).
func (c *Cluster) waitAPIServer(ctx context.Context, timeout time.Duration, watch ...*proc) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		last = fmt.Errorf("readyz: %w (%s)", err, body)
		for _, p := range watch {
			if err := p.exited(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready within %s: %w; log:\n%s", timeout, last, c.apiserver.logTail(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// newClient builds the admin clientset from the admin kubeconfig.
func (c *Cluster) newClient() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("admin kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	c.RESTConfig = cfg
	c.Client, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	return nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 (the listeners are
// closed again: another process may take one in between; rare).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
