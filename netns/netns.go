// Package netns resolves and verifies the network namespace a CNI operation
// runs in. Its one rule: never hand out a path that is not a network namespace
// or that is the host's (PID reuse once sent a DEL into the host namespace:
// containernetworking/plugins#714).
package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrHostNetns: the path is the namespace nri-cni itself (the host) runs in,
	// where a sandbox's own namespace was expected (e.g. a reused pid). Refused.
	ErrHostNetns = errors.New("is the host network namespace")
	// ErrHostNetwork: the sandbox itself uses the host's network namespace — a
	// host-network pod. Its pinned path is a bind of the host's namespace (CRI-O
	// pins one for hostNetwork pods) and its pid, when there is one, agrees.
	// There is nothing to attach; callers skip it (no CNI call either way).
	ErrHostNetwork = errors.New("uses the host network namespace (host-network sandbox)")
	// ErrNotNetns: the path exists but is not a network namespace.
	ErrNotNetns = errors.New("is not a network namespace")
	// ErrMismatch: the pid's namespace and the runtime's pinned path differ.
	ErrMismatch = errors.New("pid and pinned path name different network namespaces")
	// ErrNoNetns: neither a live pid nor a pinned path leads to a namespace.
	ErrNoNetns = errors.New("no network namespace")
)

// ID identifies a namespace: nsfs device and inode, as the kernel compares them.
type ID struct {
	Dev uint64
	Ino uint64
}

// IdentifyFunc returns the ID of the network namespace at path.
type IdentifyFunc func(path string) (ID, error)

// Identify stats path and checks, via statfs, that it is a namespace file
// (nsfs, or proc for the legacy /proc/<pid>/ns links) whose type is network.
func Identify(path string) (ID, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return ID{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	if fs.Type != unix.NSFS_MAGIC && fs.Type != unix.PROC_SUPER_MAGIC {
		return ID{}, fmt.Errorf("%s %w", path, ErrNotNetns)
	}
	f, err := os.Open(path)
	if err != nil {
		return ID{}, err
	}
	defer f.Close()
	// NS_GET_NSTYPE tells a network namespace from a mount or pid one.
	t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil {
		return ID{}, fmt.Errorf("%s %w: %w", path, ErrNotNetns, err)
	}
	if t != unix.CLONE_NEWNET {
		return ID{}, fmt.Errorf("%s %w (namespace type %#x)", path, ErrNotNetns, t)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return ID{}, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	return ID{Dev: st.Dev, Ino: st.Ino}, nil
}

// Netns is a verified network namespace.
type Netns struct {
	// Path is what CNI gets as CNI_NETNS: the runtime's pinned path when
	// there is one (it outlives the pid), else /proc/<pid>/ns/net.
	Path string
	ID   ID
}

// Resolver resolves pods' namespaces and refuses the host's.
type Resolver struct {
	procRoot string
	identify IdentifyFunc
	host     []ID
}

// Option configures a Resolver.
type Option func(*Resolver)

// WithProcRoot sets where /proc is (tests).
func WithProcRoot(dir string) Option { return func(r *Resolver) { r.procRoot = dir } }

// WithIdentify replaces Identify (tests).
func WithIdentify(f IdentifyFunc) Option { return func(r *Resolver) { r.identify = f } }

// WithHost sets the namespaces that count as the host's (tests).
func WithHost(ids ...ID) Option { return func(r *Resolver) { r.host = ids } }

// NewResolver records the host namespaces: the one this process runs in
// (its main thread never leaves it) and, when readable, PID 1's.
func NewResolver(opts ...Option) (*Resolver, error) {
	r := &Resolver{procRoot: "/proc", identify: Identify}
	for _, o := range opts {
		o(r)
	}
	if r.host == nil {
		self, err := r.identify(filepath.Join(r.procRoot, "self/ns/net"))
		if err != nil {
			return nil, fmt.Errorf("identifying the host network namespace: %w", err)
		}
		r.host = []ID{self}
		if init, err := r.identify(filepath.Join(r.procRoot, "1/ns/net")); err == nil && init != self {
			r.host = append(r.host, init)
		}
	}
	return r, nil
}

func (r *Resolver) isHost(id ID) bool {
	for _, h := range r.host {
		if h == id {
			return true
		}
	}
	return false
}

// Check verifies that path is a network namespace and not the host's.
func (r *Resolver) Check(path string) (Netns, error) {
	if path == "" {
		return Netns{}, ErrNoNetns
	}
	id, err := r.identify(path)
	if err != nil {
		return Netns{}, err
	}
	if r.isHost(id) {
		return Netns{}, fmt.Errorf("%s %w", path, ErrHostNetns)
	}
	return Netns{Path: path, ID: id}, nil
}

// Resolve finds a sandbox's network namespace from its pid and the path the
// runtime pinned it at:
//   - pid > 0: /proc/<pid>/ns/net must be a network namespace and the same
//     one as pinned (when given). If the pid route fails (the process is
//     gone), the pinned path is used on its own.
//   - pid == 0: the pinned path alone.
//
// The host's namespace is never returned: a pid in it while the pinned path
// is not (a reused pid) is ErrHostNetns; a pinned path that is the host's, with
// the pid (if any) agreeing, is ErrHostNetwork (a host-network pod); any other
// disagreement is ErrMismatch. The returned Path is the pinned path when there
// is one.
func (r *Resolver) Resolve(pid uint32, pinned string) (Netns, error) {
	return r.resolve(pid, pinned, true)
}

// ResolveRunning is Resolve for a sandbox that must be running now (a
// resync deciding what to attach): pid must be > 0 and alive in the pinned
// namespace, with no fallback to the pinned path alone.
func (r *Resolver) ResolveRunning(pid uint32, pinned string) (Netns, error) {
	if pid == 0 {
		return Netns{}, fmt.Errorf("%w: pid 0: no running process", ErrNoNetns)
	}
	return r.resolve(pid, pinned, false)
}

func (r *Resolver) resolve(pid uint32, pinned string, fallback bool) (Netns, error) {
	if pid == 0 {
		if pinned == "" {
			return Netns{}, fmt.Errorf("%w: pid 0 and no pinned path", ErrNoNetns)
		}
		return r.checkPinned(pinned)
	}
	procPath := filepath.Join(r.procRoot, strconv.FormatUint(uint64(pid), 10), "ns/net")
	id, err := r.identify(procPath)
	if err != nil {
		if pinned == "" || !fallback {
			return Netns{}, fmt.Errorf("pid %d: %w: %w", pid, ErrNoNetns, err)
		}
		return r.checkPinned(pinned)
	}
	if pinned == "" {
		if r.isHost(id) {
			return Netns{}, fmt.Errorf("pid %d: %s %w", pid, procPath, ErrHostNetns)
		}
		return Netns{Path: procPath, ID: id}, nil
	}
	pinnedID, err := r.identify(pinned)
	if err != nil {
		return Netns{}, fmt.Errorf("pinned path of pid %d: %w", pid, err)
	}
	switch {
	case pinnedID == id && r.isHost(id):
		return Netns{}, fmt.Errorf("pid %d and %s: %w", pid, pinned, ErrHostNetwork)
	case r.isHost(id):
		return Netns{}, fmt.Errorf("pid %d: %s %w, but %s is not", pid, procPath, ErrHostNetns, pinned)
	case pinnedID != id:
		return Netns{}, fmt.Errorf("pid %d (%s) vs %s: %w", pid, procPath, pinned, ErrMismatch)
	}
	return Netns{Path: pinned, ID: id}, nil
}

// checkPinned verifies a pinned path on its own: a network namespace; the
// host's means a host-network sandbox (ErrHostNetwork).
func (r *Resolver) checkPinned(pinned string) (Netns, error) {
	id, err := r.identify(pinned)
	if err != nil {
		return Netns{}, err
	}
	if r.isHost(id) {
		return Netns{}, fmt.Errorf("%s %w", pinned, ErrHostNetwork)
	}
	return Netns{Path: pinned, ID: id}, nil
}

// Links lists the interface names in the network namespace at path (a
// path Resolve or Check returned).
func (r *Resolver) Links(path string) ([]string, error) { return LinkNames(path) }
