package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cmd/internal/cli"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/deviceinfo"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/kube/dradevice"
	"github.com/nri-cni/nri-cni/kube/podresources"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/state"
)

// startKubernetes starts Kubernetes mode for cfg's kubernetes section (NAD
// informer, status writer, Event recorder, all living until ctx ends) and
// returns what the engine gets from it, and what to start once the engine
// exists (hot-plug's pod watcher).
func startKubernetes(ctx context.Context, cfg config.Config, getenv func(string) string, log *logrus.Entry) (*cli.KubeMode, error) {
	k := cfg.Kubernetes
	clients, err := kube.NewClients(k, getenv)
	if err != nil {
		return nil, err
	}
	policy, err := nadpolicy.New(k.NADPolicyOrDefault())
	if err != nil {
		return nil, err
	}
	mode := kube.Start(ctx, clients, log.WithField("component", "kube"),
		kube.Options{NADPolicy: policy, MaxNADConfigBytes: k.NADConfigLimit(), MaxNADCacheBytes: k.NADCacheLimit()})
	source := "in-cluster"
	if k.Kubeconfig != "" {
		source = k.Kubeconfig
	}
	log.WithFields(logrus.Fields{"apiServer": clients.Host, "credentials": source, "node": clients.NodeName,
		"npwgAnnotation": k.NPWGAnnotation, "sharedNamespaces": k.SharedNamespaces, "nadCacheBytes": k.NADCacheLimit()}).
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
	pol, err := startPolicy(k, clients, mode, log)
	if err != nil {
		return nil, err
	}
	km := &cli.KubeMode{NADs: mode.Source, Sink: mode.Status, Multus: multus.Primary, Ready: func() error {
		if !mode.Source.HasSynced() {
			return errors.New("the NetworkAttachmentDefinition cache has not synced yet")
		}
		if pol != nil {
			return pol.ready()
		}
		return nil
	}}
	if pol != nil {
		km.Policy, km.Firewall = pol.source, pol.firewall
	}
	// Device plugin resources of NADs: the kubelet's PodResources API (no
	// I/O until a pod needs it) and the NPWG device-info directory, host
	// paths resolved inside pluginRoot when that is set.
	podRes, err := podresources.New(podresources.Options{Root: cfg.PluginRoot, Socket: k.PodResources()})
	if err != nil {
		return nil, err
	}
	// Other DRA drivers' devices (Multus's resourceName attribute): the
	// node's ResourceSlices, from an informer.
	draDevices, err := kube.NodeSlices(ctx, clients.Core, clients.NodeName)
	if err != nil {
		log.WithError(err).Warn("Kubernetes mode: networks cannot take devices of other DRA drivers (device plugins' still work)")
	}
	devices := kube.DeviceSource{Client: podRes, DRA: draDevices}
	if draDevices != nil {
		// Networks naming a claim request (nri-cni.io/resourceClaim): the
		// pod's claims from the API server, the drivers' KEP-5304 device
		// metadata from the kubelet's plugin dirs (under pluginRoot).
		devices.Claims = kube.APIClaims{Client: clients.Core}
		devices.Metadata = dradevice.FileMetadata{Root: cfg.PluginRoot, KubeletDir: k.DRA.KubeletRoot()}
	}
	km.Devices = devices
	km.DeviceInfo = deviceinfo.Store{Root: cfg.PluginRoot, Dir: k.DeviceInfo()}
	var claims *state.Claims
	if k.DRAOn() {
		// Opened now: the engine reads the prepared claims at every pod start.
		if claims, err = state.OpenClaims(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("DRA: %w", err)
		}
		for _, err := range claims.LoadErrors() {
			log.WithError(err).Error("DRA: a prepared claim's record is unreadable")
		}
		// Before the runtime is served: a claim the kubelet holds as
		// prepared without a readable record fails its pod's networks.
		dra.CheckRecordsAtStart(claims, dra.CheckpointPath(k.DRA.KubeletRoot()), log.WithField("component", "dra"))
		km.Claims = claims
	}
	km.Start = func(st cli.Started) error {
		mgr, resync := st.Manager, st.Resync
		if st.Metrics != nil {
			mode.Source.SetObserver(st.Metrics) // nri_cni_nad_cache_dropped
		}
		// Each status written is recorded: a restart writes only those
		// it did not confirm (the fleet's restart storm, docs/scale.md).
		mode.Status.OnWritten(mgr.StatusWritten)
		if pol != nil {
			pol.start(ctx, mgr, st.Metrics)
		} else {
			go removePolicies(ctx, mgr, log)
		}
		if k.HotplugOn() {
			var w *kube.PodWatcher
			if pol != nil {
				// One pod watch on the node: MultiNetworkPolicy's
				// reflector feeds hot-plug this node's pods.
				w = kube.NewSharedPodWatcher(pol.m.LocalPods(), mgr, log.WithField("component", "hotplug"), kube.PodWatchOptions{})
			} else {
				w = kube.NewPodWatcher(clients.Core, clients.NodeName, mgr, log.WithField("component", "hotplug"), kube.PodWatchOptions{})
			}
			resync.AfterSync(w.ResyncAll)
			go w.Run(ctx, 0)
			log.WithField("node", clients.NodeName).Info("hot-plug on: pods' networks follow their networks annotation")
		}
		if !k.DRAOn() {
			return nil
		}
		node := kube.DRANode{Config: cfg, Clients: clients, Mode: mode, Claims: claims, Engine: mgr, Serving: st.Serving,
			Log: log.WithField("component", "dra")}
		if st.Metrics != nil {
			node.Observer = st.Metrics
		}
		drv, err := kube.StartDRA(ctx, node)
		if err != nil {
			return err
		}
		inv := drv.Published()
		log.WithFields(logrus.Fields{"driver": dra.DriverName, "node": clients.NodeName, "devices": len(inv.Devices),
			"notPublished": len(inv.Skipped), "kubeletDir": k.DRA.KubeletRoot(), "sharing": k.DRA.SharingMode()}).
			Info("DRA driver registered: networks as ResourceClaims")
		return nil
	}
	return km, nil
}
