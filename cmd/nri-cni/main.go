// Command nri-cni binds CNI networks to the container lifecycle: as an NRI
// plugin (external daemon or pre-launched by the runtime) and as an OCI hook.
// It links no Kubernetes API client: Kubernetes mode is nri-cni-k8s.
package main

import (
	"os"

	"github.com/nri-cni/nri-cni/cmd/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], nil)) }
