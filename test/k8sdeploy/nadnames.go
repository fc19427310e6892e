package k8sdeploy

import (
	"crypto/rand"
	"fmt"
	"math/big"

	"github.com/nri-cni/nri-cni/test/harness"
)

// deploy/base ships kubernetes.nadPolicy (and its admission policy) with
// bridges "nad-*" and ipamRanges [10.251.0.0/16]: the NADs the tests create
// on a cluster running deploy/base use these, so both let them through.

// NADBridge is a unique bridge name deploy/base's NAD policy allows.
func NADBridge() string { return harness.RandomName("nad-") }

// NADSubnet is a random /24 inside deploy/base's NAD policy's ipamRanges.
func NADSubnet() string {
	n, _ := rand.Int(rand.Reader, big.NewInt(256))
	return fmt.Sprintf("10.251.%d.0/24", n.Int64())
}
