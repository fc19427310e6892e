package netns

import (
	"fmt"
	"os"
	"strconv"
)

// Held keeps a network namespace alive, whatever happens to the path it was
// opened at (the runtime unmounting its pin once StopPodSandbox returns),
// until Release. Path names it for a plugin run as a child of this process:
// /proc/<this pid>/fd/<fd>, a link the kernel resolves to the namespace for
// any process that may read this one's fds (root; with hostPID, also from a
// plugin chrooted into the host's root, whose /proc is the host's).
type Held struct {
	Path    string
	ID      ID
	release func()
}

// NewHeld is a Held whose Release calls release (fakes in tests).
func NewHeld(path string, id ID, release func()) *Held {
	return &Held{Path: path, ID: id, release: release}
}

// Release closes the namespace's fd: the namespace goes once nothing else
// holds it. Once; later calls do nothing.
func (h *Held) Release() {
	if h != nil && h.release != nil {
		h.release()
		h.release = nil
	}
}

// Hold opens the network namespace at path and checks that it is still the
// namespace want (a pin path reused for another sandbox is not held).
func Hold(path string, want ID) (*Held, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	held := "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(int(f.Fd()))
	id, err := Identify(held)
	if err == nil && want != (ID{}) && id != want {
		err = fmt.Errorf("%s: %w (another namespace than the one recorded)", path, ErrMismatch)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &Held{Path: held, ID: id, release: func() { _ = f.Close() }}, nil
}

// Hold is the package's Hold, as a method for callers that take a Resolver
// through an interface; the host's namespace is never held.
func (r *Resolver) Hold(path string, want ID) (*Held, error) {
	h, err := Hold(path, want)
	if err != nil {
		return nil, err
	}
	if r.isHost(h.ID) {
		h.Release()
		return nil, fmt.Errorf("%s %w", path, ErrHostNetns)
	}
	return h, nil
}
