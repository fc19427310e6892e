package podresources

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nri-cni/nri-cni/hostroot"
)

// DefaultSocket is where the kubelet serves PodResources with its default
// --root-dir (<root-dir>/pod-resources/kubelet.sock).
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Defaults of Options.
const (
	// DefaultMaxMessageSize bounds one answer (a List of every pod of the
	// node): 16 MiB, as Multus sets it.
	DefaultMaxMessageSize = 16 << 20
	// DefaultQPS and DefaultBurst: half of the kubelet's node-wide budget
	// (100 per second, burst 10), which every PodResources client shares.
	DefaultQPS   = 50
	DefaultBurst = 5
	// DefaultMaxParallelGets: with this many Gets in flight, further pods are
	// looked up with one List.
	DefaultMaxParallelGets = 4
	DefaultListReuse       = time.Second
	DefaultCacheTTL        = 30 * time.Second
	DefaultMaxEntries      = 1024
	DefaultCallTimeout     = 10 * time.Second
	// DefaultGetReprobe: after the kubelet said it does not serve Get, List
	// only for this long, then try Get again (the kubelet may have been
	// upgraded).
	DefaultGetReprobe = 10 * time.Minute
)

// Options configure a Client. A zero field takes its default.
type Options struct {
	// Socket is the kubelet's PodResources socket (DefaultSocket), a host
	// path.
	Socket string
	// Root is where the host's / is seen (nri.conf pluginRoot; "" = this
	// process's own /): Socket is resolved inside it at each connection
	// (hostroot.Path), so a symlink on its way (/var/lib/kubelet to another
	// disk, /var/run to /run) leads where the host has it.
	Root string
	// MaxMessageSize is the largest answer accepted, in bytes.
	MaxMessageSize int
	// QPS and Burst limit this client's calls (a token bucket); QPS < 0: no
	// limit of our own (the kubelet's still applies).
	QPS   float64
	Burst int
	// MaxParallelGets: Gets in flight at most; beyond, one List serves the
	// pods. < 0: never Get (List only).
	MaxParallelGets int
	// ListReuse: a List's answer serves lookups that start up to this long
	// after it started. < 0: no reuse (coalescing of calls in flight stays).
	ListReuse time.Duration
	// CacheTTL: how long a pod's answer is kept by UID; < 0: no cache.
	CacheTTL time.Duration
	// MaxEntries bounds the cache (pods).
	MaxEntries int
	// CallTimeout bounds one call to the kubelet with its retries, whatever
	// the deadlines of the lookups waiting for it (each leaves at its own).
	CallTimeout time.Duration
	// GetReprobe: how long to use List only after Get was found unsupported.
	GetReprobe time.Duration
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.QPS == 0 {
		o.QPS = DefaultQPS
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.MaxParallelGets == 0 {
		o.MaxParallelGets = DefaultMaxParallelGets
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	def(&o.ListReuse, DefaultListReuse)
	def(&o.CacheTTL, DefaultCacheTTL)
	def(&o.CallTimeout, DefaultCallTimeout)
	def(&o.GetReprobe, DefaultGetReprobe)
	return o
}

// Stats count what a Client did since New.
type Stats struct {
	Gets, Lists   int // calls made (each attempt, retries included)
	RateLimited   int // answers ResourceExhausted "rejected by rate limit"
	Retries       int // attempts after a retryable error
	Coalesced     int // lookups that joined a call in flight or a List's answer
	CacheHits     int // lookups answered from the cache
	GetFallbacks  int // times the kubelet said it does not serve Get
	CacheEntries  int // pods cached now
	ListsReused   int // lookups served by a List that had already finished
	PodsNotListed int // lookups that ended in ErrPodNotFound
}

// Client looks up pods' resources in the kubelet. Safe for concurrent use;
// create one per node and share it.
type Client struct {
	o       Options
	conn    *grpc.ClientConn
	api     podresourcesv1.PodResourcesListerClient
	limiter *rate.Limiter
	now     func() time.Time

	// mu guards the fields below. Locking rule: it is never held across an
	// RPC, a rate limiter wait, a backoff or a wait for a flight.
	mu          sync.Mutex
	list        *flight            // the latest List, in flight or finished
	gets        map[string]*flight // Gets in flight, by namespace/name
	getOffUntil time.Time          // Get unsupported: List only until then
	cache       map[string]cacheEntry
	stats       Stats
}

// New returns a Client for the kubelet's socket. It does no I/O: the
// connection is made by the first lookup (and remade after a kubelet restart).
func New(o Options) (*Client, error) {
	o = o.withDefaults()
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxMessageSize)),
		// Reconnect soon after a kubelet restart (gRPC's default waits 1s,
		// then up to 2 minutes): lookups retry Unavailable within their
		// deadline, which is seconds.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
	}
	if hostroot.On(o.Root) {
		opts = append(opts, grpc.WithContextDialer(o.dialInRoot))
	}
	conn, err := grpc.NewClient("unix://"+o.Socket, opts...)
	if err != nil {
		return nil, fmt.Errorf("podresources: %s: %w", o.Socket, err)
	}
	lim := rate.NewLimiter(rate.Inf, 0)
	if o.QPS > 0 {
		lim = rate.NewLimiter(rate.Limit(o.QPS), o.Burst)
	}
	return &Client{
		o: o, conn: conn, api: podresourcesv1.NewPodResourcesListerClient(conn), limiter: lim, now: time.Now,
		gets: map[string]*flight{}, cache: map[string]cacheEntry{},
	}, nil
}

// dialInRoot connects to Socket resolved inside Root, anew at each
// connection.
func (o Options) dialInRoot(ctx context.Context, _ string) (net.Conn, error) {
	p, err := hostroot.Path(o.Root, o.Socket)
	if err != nil {
		return nil, fmt.Errorf("%s under %s: %w", o.Socket, o.Root, err)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", p)
}

// Close closes the connection; lookups in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// Socket is the kubelet socket the client asks.
func (c *Client) Socket() string { return c.o.Socket }

// Stats returns the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.CacheEntries = len(c.cache)
	return s
}

// DeviceIDs returns the IDs of the devices of resourceName that the kubelet
// allocated to pod, in the stable order of PodResources.DeviceIDs (several
// networks of one resource take them in turn). Errors wrap ErrPodNotFound,
// ErrNoDevices, ErrAmbiguousPod, the RPC's error or ctx's, and name the pod
// and the resource.
func (c *Client) DeviceIDs(ctx context.Context, pod Pod, resourceName string) ([]string, error) {
	var ids []string
	_, err := c.lookup(ctx, pod, func(p *PodResources) error {
		if ids = p.DeviceIDs(resourceName); len(ids) == 0 {
			return fmt.Errorf("%w (it lists devices of %q)", ErrNoDevices, p.ResourceNames())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("podresources: resource %q of pod %s: %w", resourceName, pod, err)
	}
	return ids, nil
}

// PodResources returns everything the kubelet reports for pod: device plugin
// devices and DRA claims per container. Errors as DeviceIDs's.
func (c *Client) PodResources(ctx context.Context, pod Pod) (*PodResources, error) {
	p, err := c.lookup(ctx, pod, func(*PodResources) error { return nil })
	if err != nil {
		return nil, fmt.Errorf("podresources: pod %s: %w", pod, err)
	}
	return p, nil
}

// Select finds pod in the kubelet's answers and hands it to accept, whose
// error means "not (yet) there": a cached or older answer is then replaced
// by a fresh call, and a fresh answer's error is returned (wrapped with the
// pod). DeviceIDs is Select for one device plugin resource.
func (c *Client) Select(ctx context.Context, pod Pod, accept func(*PodResources) error) error {
	if _, err := c.lookup(ctx, pod, accept); err != nil {
		return fmt.Errorf("podresources: pod %s: %w", pod, err)
	}
	return nil
}

// Forget drops the pod's cached answer (call it when the pod is removed).
func (c *Client) Forget(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cache, uid)
}
