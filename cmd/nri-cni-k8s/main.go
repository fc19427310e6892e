// Command nri-cni-k8s is nri-cni with Kubernetes mode: the same commands,
// plus NetworkAttachmentDefinitions, network-status and hot-plug through the
// Kubernetes API (the DaemonSet runs it). The node's hooks and drop-in use
// nri-cni, which links no API client.
package main

import (
	"os"

	"github.com/nri-cni/nri-cni/cmd/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], &cli.Kube{Start: startKubernetes, Cluster: readCluster})) }
