package main

import (
	"github.com/nri-cni/nri-cni/cmd/internal/cli"
	"github.com/nri-cni/nri-cni/kube"
)

// readCluster gives migrate-check read access to the API server.
func readCluster(o cli.ClusterOptions) (cli.Cluster, error) {
	r, err := kube.NewReader(o.Kubeconfig, o.Context)
	if err != nil {
		return nil, err
	}
	if o.ChunkSize > 0 {
		r.PageSize = o.ChunkSize
	}
	return r, nil
}
