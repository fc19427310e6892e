package fleet

import (
	"sync"
	"sync/atomic"

	clientfeatures "k8s.io/client-go/features"
)

// switchGates are client-go's feature gates with WatchListClient
// switchable (override: 0 = as the base says, 1 = on, 2 = off).
type switchGates struct {
	base     clientfeatures.Gates
	override atomic.Int32
}

func (g *switchGates) Enabled(k clientfeatures.Feature) bool {
	if k == clientfeatures.WatchListClient {
		switch g.override.Load() {
		case 1:
			return true
		case 2:
			return false
		}
	}
	return g.base.Enabled(k)
}

var (
	gatesOnce sync.Once
	gates     *switchGates
)

// installGates puts switchGates in place of client-go's, before any
// informer of the fleet exists (client-go warns when its gates are
// replaced after it read them).
func installGates() {
	gatesOnce.Do(func() {
		gates = &switchGates{base: clientfeatures.FeatureGates()}
		clientfeatures.ReplaceFeatureGates(gates)
	})
}

// WatchList turns client-go's WatchListClient (on by default from
// v0.35: an informer's first list is a watch that streams it from the API
// server's watch cache) on or off for the informers made from now on,
// process-wide, and returns what undoes it. The bench compares a restart
// storm both ways.
func WatchList(on bool) (restore func()) {
	installGates()
	v := int32(2)
	if on {
		v = 1
	}
	old := gates.override.Swap(v)
	return func() { gates.override.Store(old) }
}
