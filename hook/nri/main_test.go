package nri

import (
	"os"
	"testing"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/reconcile"
)

func TestMain(m *testing.M) { os.Exit(attachtest.Main(m)) }

// testEngine is mgr with a resync of its own.
func testEngine(mgr *attach.Manager) *Engine {
	return &Engine{Manager: mgr, Resync: reconcile.NewResyncer(mgr, attachtest.Log())}
}
