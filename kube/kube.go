// Package kube is nri-cni's Kubernetes mode: the only package that talks to
// the API server. It implements the two interfaces the attach.Manager uses —
// plan.NADSource (NADSource: NetworkAttachmentDefinitions from an
// informer cache) and attach.StatusSink (StatusWriter: network-status patches
// and Warning Events from a work queue) — so the attach path reads memory
// only and never waits for the API server.
package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
)

// NodeNameEnv is where the node name comes from when the config has none
// (the DaemonSet sets it from the downward API).
const NodeNameEnv = "NODE_NAME"

// ErrNoNodeName: neither kubernetes.nodeName nor NODE_NAME is set.
var ErrNoNodeName = errors.New("no node name: set kubernetes.nodeName or the " + NodeNameEnv + " environment variable")

// Clients are the API clients Kubernetes mode uses.
type Clients struct {
	Core     kubernetes.Interface
	NAD      nadclient.Interface
	NodeName string
	// Host is the API server's address (for the startup log).
	Host string
	// REST is the tuned config the clients were built from (typed clients
	// of other groups: MultiNetworkPolicies).
	REST *rest.Config
}

// NewClients builds the clients from the kubernetes section: its kubeconfig,
// or in-cluster config (whose token file client-go re-reads as it rotates).
func NewClients(k *config.KubernetesConfig, getenv func(string) string) (*Clients, error) {
	node := k.NodeName
	if node == "" {
		node = getenv(NodeNameEnv)
	}
	if node == "" {
		return nil, ErrNoNodeName
	}
	var rc *rest.Config
	var err error
	if k.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes API client (kubeconfig %q): %w", k.Kubeconfig, err)
	}
	return NewClientsFor(rc, node)
}

// NewClientsFor builds the clients from rc (not changed: a copy is tuned)
// for node, tuned as Kubernetes mode runs them: NewClients after reading
// the credentials, and fleet simulations, which hand in a config of their
// own (a node-bound token, a counting transport).
func NewClientsFor(rc *rest.Config, node string) (*Clients, error) {
	if node == "" {
		return nil, ErrNoNodeName
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "nri-cni/" + node
	// client-go's default (5 QPS, burst 10) would make a node's pod storm
	// wait seconds for its network-status; the kubelet's own defaults.
	rc.QPS, rc.Burst = 50, 100
	core, nad, err := clientsFor(rc)
	if err != nil {
		return nil, err
	}
	return &Clients{Core: core, NAD: nad, NodeName: node, Host: rc.Host, REST: rc}, nil
}

// clientsFor builds the core and NAD clients of rc.
func clientsFor(rc *rest.Config) (kubernetes.Interface, nadclient.Interface, error) {
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes API client: %w", err)
	}
	nad, err := nadclient.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("NetworkAttachmentDefinition client: %w", err)
	}
	return core, nad, nil
}

// Mode is Kubernetes mode running: the source and sink to hand the Manager.
type Mode struct {
	Source *NADSource
	Status *StatusWriter
	// Recorder raises Events (core/v1, rate-limited by client-go).
	Recorder record.EventRecorder
}

// Options tunes Start.
type Options struct {
	// Resync re-lists NADs this often (0 = never; the watch keeps the cache).
	Resync time.Duration
	// Workers write statuses (default 2).
	Workers int
	Status  StatusOptions
	// Recorder overrides the Event recorder (tests); nil = core/v1 Events
	// through a broadcaster.
	Recorder record.EventRecorder
	// NADPolicy judges every NAD's spec.config (nil: the fail-closed code
	// default); MaxNADConfigBytes bounds it (0: the default).
	NADPolicy         *nadpolicy.Policy
	MaxNADConfigBytes int
	// MaxNADCacheBytes bounds the NAD cache (0: the default).
	MaxNADCacheBytes int
}

// Start runs the NAD informer, the status workers and the Event broadcaster
// until ctx ends. It does not wait for the cache: until it has synced, pods
// that ask for a NAD fail with plan.ErrSourceNotSynced (WaitForSync to wait).
func Start(ctx context.Context, c *Clients, log *logrus.Entry, o Options) *Mode {
	if o.Workers <= 0 {
		o.Workers = 2
	}
	rec := o.Recorder
	if rec == nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Core.CoreV1().Events("")})
		rec = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nri-cni", Host: c.NodeName})
		go func() {
			<-ctx.Done()
			b.Shutdown()
		}()
	}
	m := &Mode{Source: NewNADSource(c.NAD, NADSourceOptions{Resync: o.Resync, Policy: o.NADPolicy,
		MaxConfigBytes: o.MaxNADConfigBytes, MaxCacheBytes: o.MaxNADCacheBytes, Log: log.WithField("cache", "nad")}),
		Status: NewStatusWriter(c.Core, rec, log, o.Status), Recorder: rec}
	go m.Source.Run(ctx)
	go m.Status.Run(ctx, o.Workers)
	return m
}
