package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// k8sWorld is a single-node cluster (test/cluster) with nri-cni deployed
// from deploy/base through the test overlay (test/k8sdeploy), as the
// Kubernetes sections measure it.
type k8sWorld struct {
	c *cluster.Cluster
	d *k8sdeploy.Deployed
}

// startK8sWorld builds nri-cni's image while the cluster starts in dir, then
// deploys it. edit may change the kubelet's configuration. On error what was
// started is undone.
func startK8sWorld(ctx context.Context, e *env, dir string, edit func(map[string]any)) (w *k8sWorld, err error) {
	ktools, err := cluster.EnsureTools(ctx)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var tar string
	var imgErr error
	wg.Add(1)
	go func() { defer wg.Done(); tar, imgErr = k8sdeploy.BuildImage(ctx, filepath.Join(dir, "image")) }()
	c, err := cluster.Start(ctx, cluster.Opts{Dir: filepath.Join(dir, "c"), Tools: ktools, RuntimeTools: e.tools,
		EditKubeletConfig: edit})
	wg.Wait()
	if err != nil {
		return nil, errors.Join(err, imgErr)
	}
	w = &k8sWorld{c: c}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.close(context.WithoutCancel(ctx)))
			w = nil
		}
	}()
	if imgErr != nil {
		return w, imgErr
	}
	w.d, err = k8sdeploy.Deploy(ctx, c, filepath.Join(dir, "deploy"), tar)
	return w, err
}

// close undeploys nri-cni (its pod gone first, so nothing of it is left
// running), stops the cluster and undoes the overlay's host changes.
func (w *k8sWorld) close(ctx context.Context) error {
	var errs []error
	var overlay *k8sdeploy.Overlay
	if w.d != nil {
		overlay = w.d.Overlay
		errs = append(errs, w.d.Undeploy(ctx))
	}
	errs = append(errs, w.c.Close(ctx))
	if overlay != nil {
		errs = append(errs, overlay.Close())
	}
	return errors.Join(errs...)
}

// setConf replaces, in the nri.conf of nri-cni's ConfigMap, each old string
// with its new one (pairs) and replaces the DaemonSet's pod, waiting until
// the new one is connected.
func (w *k8sWorld) setConf(ctx context.Context, oldNew ...string) error {
	cm, err := w.c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "nri-cni", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("nri-cni's ConfigMap: %w", err)
	}
	conf := cm.Data["nri.conf"]
	for i := 0; i+1 < len(oldNew); i += 2 {
		if !strings.Contains(conf, oldNew[i]) {
			return fmt.Errorf("nri-cni's nri.conf has no %q:\n%s", oldNew[i], conf)
		}
		conf = strings.Replace(conf, oldNew[i], oldNew[i+1], 1)
	}
	cm.Data["nri.conf"] = conf
	if _, err := w.c.Client.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating nri-cni's ConfigMap: %w", err)
	}
	synced := w.d.Registrations()
	if _, err := w.c.Kubectl(ctx, "-n", "kube-system", "rollout", "restart", "ds/nri-cni"); err != nil {
		return err
	}
	if _, err := w.c.Kubectl(ctx, "-n", "kube-system", "rollout", "status", "ds/nri-cni", "--timeout=3m"); err != nil {
		return err
	}
	_, err = w.d.WaitReady(ctx, synced+1, 3*time.Minute)
	return err
}
