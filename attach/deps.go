package attach

// What the engine needs of the layers below it, declared here so that its
// tests (and anything else) can hand it their own: the CNI runtime
// (*cni.Engine satisfies CNI) and the record store (*state.Store satisfies
// Records).

import (
	"context"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/state"
)

// CNI runs the CNI operations of the loaded networks.
type CNI interface {
	// Networks are the loaded networks, in the config dir's order.
	Networks() []*cni.Network
	// FindPlugin is the path of plugin type typ in the bin dirs.
	FindPlugin(typ string) (string, error)
	Add(ctx context.Context, n *cni.Network, a cni.Attachment) (*cni.Result, error)
	// DelFallback deletes name's attachment with libcni's cached config,
	// or fallback's when there is no cache entry.
	DelFallback(ctx context.Context, name string, fallback *cni.Network, a cni.Attachment) error
	Check(ctx context.Context, name string, a cni.Attachment) error
	Status(ctx context.Context, n *cni.Network) error
	GC(ctx context.Context, n *cni.Network, valid []types.GCAttachment) error
	// CachedAttachments are libcni's cache entries of a container.
	CachedAttachments(containerID string) ([]*libcni.NetworkAttachment, error)
	CachedResult(att *libcni.NetworkAttachment) (*cni.Result, error)
}

// Records keeps one record per sandbox or container.
type Records interface {
	Get(id string) (*state.Record, error)
	Put(rec *state.Record) error
	Delete(id string) error
	// List is every readable record and one error per unreadable file.
	List() ([]*state.Record, []error)
	// Modified is when id's record was last written.
	Modified(id string) (time.Time, error)
}

var (
	_ CNI     = (*cni.Engine)(nil)
	_ Records = (*state.Store)(nil)
)
