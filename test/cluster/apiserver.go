package cluster

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"time"
)

// StopAPIServer stops kube-apiserver (SIGTERM, by pid): the kubelet, the
// runtime and the pods keep running, as on a control-plane outage.
func (c *Cluster) StopAPIServer() { c.apiserver.stop(30 * time.Second) }

// StartAPIServer starts kube-apiserver again (after StopAPIServer), with the
// same flags, keys and port, and waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if c.apiserver.running() {
		return fmt.Errorf("kube-apiserver already running (pid %d)", c.apiserver.pid())
	}
	if err := c.apiserver.start(); err != nil {
		return err
	}
	return c.waitAPIServer(ctx, 2*time.Minute, c.etcd, c.apiserver)
}

// APIServerHostPort is the API server's host and port (127.0.0.1 and its
// private port): what in-cluster clients on the node reach it by here,
// where no kube-proxy serves the kubernetes Service's cluster IP.
func (c *Cluster) APIServerHostPort() (host, port string) {
	u, err := url.Parse(c.APIServerURL)
	if err != nil {
		return "", ""
	}
	return u.Hostname(), u.Port()
}

// StaticPodDir is the kubelet's staticPodPath: a manifest written there
// becomes a static pod (and, while the API server is reachable, its mirror
// pod).
func (c *Cluster) StaticPodDir() string { return filepath.Join(c.Dir, "manifests") }
