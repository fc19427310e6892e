package reconcile

// What each reconciler needs of the attachment engine, declared here, by
// the one that needs it: attach.Manager is all of them. Each loop's tests
// may hand it a fake of just that.

import (
	"context"
	"time"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// recordLister lists the engine's records (unreadable ones as errors).
type recordLister interface {
	Records() ([]*state.Record, []error)
}

// Checker runs the drift checks (CNI CHECK) of one sandbox's networks.
type Checker interface {
	recordLister
	Check(ctx context.Context, id string) (checked, failed int, busy bool)
}

// Collector tears down what no live sandbox holds.
type Collector interface {
	recordLister
	NetnsUsable(rec *state.Record) string
	Collect(ctx context.Context, id string, live attach.LiveFunc) (attach.Outcome, error)
	CollectCached(ctx context.Context) (deleted, busy int, errs []error)
	PluginGC(ctx context.Context) (skipped bool, errs []error)
}

// SyncEngine is what the resync needs of the engine: the records and their
// teardown (Collector), the current nri.conf (reloads change it), the
// runtime's list, attaching a listed pod, and stopping a container started
// without its networks.
type SyncEngine interface {
	Collector
	PidResolver
	Config() config.Config
	SetLive(list []attach.Sandbox)
	ReportLive(live []attach.Sandbox)
	Running(sb attach.Sandbox, pidless bool) error
	AttachIfAbsent(ctx context.Context, sb attach.Sandbox) (*state.Record, error)
	Record(id string) (*state.Record, error)
	ReportStartedWithout(s attach.StartedWithout)
}

// Releaser releases sandboxes whose network namespace is gone, and retries
// failed teardowns.
type Releaser interface {
	recordLister
	NetnsUsable(rec *state.Record) string
	OnNetns(f func(path string))
	DetachWithin(ctx context.Context, sb attach.Sandbox, final bool, lockWait time.Duration) (tore bool, _ error)
	RetryTeardowns(ctx context.Context, now time.Time)
}
