package main

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/hook"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/nadpolicy"
)

// kubernetesOptions starts Kubernetes mode when the config has a kubernetes
// section (NAD informer, status writer, Event recorder, all living until ctx
// ends) and returns the Manager options that hand them over, and what to
// start once the Manager exists (hot-plug's pod watcher). Without the
// section: no options, no API client.
func (a *app) kubernetesOptions(ctx context.Context, cfg config.Config, log *logrus.Entry) ([]hook.Option, func(*hook.Manager), error) {
	k := cfg.Kubernetes
	if k == nil {
		log.Debug("Kubernetes mode off (no kubernetes section): no API client")
		return nil, nil, nil
	}
	clients, err := kube.NewClients(k, a.getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes: %w", err)
	}
	policy, err := nadpolicy.New(k.NADPolicyOrDefault())
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes: %w", err)
	}
	mode := kube.Start(ctx, clients, log.WithField("component", "kube"),
		kube.Options{NADPolicy: policy, MaxNADConfigBytes: k.NADConfigLimit()})
	source := "in-cluster"
	if k.Kubeconfig != "" {
		source = k.Kubeconfig
	}
	log.WithFields(logrus.Fields{"apiServer": clients.Host, "credentials": source, "node": clients.NodeName,
		"npwgAnnotation": k.NPWGAnnotation, "sharedNamespaces": k.SharedNamespaces}).
		Info("Kubernetes mode: NetworkAttachmentDefinitions from an informer cache, network-status written back (never on the attach path)")
	go func() {
		if err := mode.Source.WaitForSync(ctx); err == nil {
			log.Info("Kubernetes mode: NetworkAttachmentDefinition cache synced")
		}
	}()
	multus := cni.NewMultusDetector(k.RuntimeConfDir())
	if f := multus.Primary(); f != "" && k.NPWG() {
		log.WithField("file", f).Warn("Kubernetes mode: Multus is this node's primary network: the NPWG annotation and network-status are left to it (nri-cni.io/networks still works)")
	}
	afterBuild := func(mgr *hook.Manager) {
		if !k.HotplugOn() {
			return
		}
		w := kube.NewPodWatcher(clients.Core, clients.NodeName, mgr, log.WithField("component", "hotplug"), kube.PodWatchOptions{})
		mgr.AfterSync(w.ResyncAll)
		go w.Run(ctx, 0)
		log.WithField("node", clients.NodeName).Info("hot-plug on: pods' networks follow their networks annotation")
	}
	return []hook.Option{hook.WithNetworkSource(mode.Source), hook.WithStatusSink(mode.Status),
		hook.WithMultusCheck(multus.Primary)}, afterBuild, nil
}
