package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// A node's root directory, as nri-cni's DaemonSet mounts it at /host
// (nri.conf pluginRoot) and runs the CNI plugins chrooted into it, for a
// test node that is this machine. Not this machine's / itself: a recursive
// bind of / would copy every other test's mounts (netns pins, containerd's
// snapshots) into nri-cni's container and keep them alive there, and this
// VM's / does not propagate their removal. The stand-in is a tmpfs with this
// machine's system dirs bound in, non-recursively: /usr and /etc (iptables
// and its alternatives, shared libraries) and the bin and lib dirs read
// only, /proc and /sys, /dev read only; a /run of its own (/var/run links to
// it) holding this machine's iptables lock when there is one; and the test
// node's own dirs at their node paths (RootBind).

// RootBind shows Source at Path inside a node root. The bind is private
// unless Peer: then it stays in Source's peer group (Source being a shared
// mount, such as a runtime's pinned-netns dir), so that mounts made under
// Source later (new pins) show at Path too.
type RootBind struct {
	Source, Path string
	ReadOnly     bool
	Peer         bool
}

// MountNodeRoot mounts the stand-in at dir (an existing, empty directory)
// with binds added last, in order. With shared, the root mount is made
// shared once built, so that a container may mount it with mountPropagation
// HostToContainer (a bind in binds of a shared mount, such as a runtime's
// pinned-netns dir, then passes new pins on). undo unmounts it all, lazily;
// dir itself stays (remove it with os.Remove, never recursively while
// mounted).
func MountNodeRoot(dir string, shared bool, binds ...RootBind) (undo func() error, err error) {
	if err := unix.Mount("nri-cni-test-node-root", dir, "tmpfs", 0, "mode=0755"); err != nil {
		return nil, fmt.Errorf("node root %s: %w", dir, err)
	}
	undo = func() error { return unix.Unmount(dir, unix.MNT_DETACH) }
	defer func() {
		if err != nil {
			_ = undo()
			undo = nil
		}
	}()
	// Nothing bound under it reaches the mount peers of dir's parent.
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("node root %s: private: %w", dir, err)
	}
	for _, p := range []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0: // merged /usr: /bin -> usr/bin
			target, err := os.Readlink(p)
			if err == nil {
				err = os.Symlink(target, filepath.Join(dir, p))
			}
			if err != nil {
				return nil, fmt.Errorf("node root: %w", err)
			}
		default:
			if err := BindInRoot(dir, RootBind{Source: p, Path: p, ReadOnly: true}); err != nil {
				return nil, err
			}
		}
	}
	system := []RootBind{{Source: "/proc", Path: "/proc"}, {Source: "/sys", Path: "/sys"}, {Source: "/dev", Path: "/dev", ReadOnly: true}}
	if _, err := os.Stat("/run/xtables.lock"); err == nil { // iptables-legacy's lock: the same file
		system = append(system, RootBind{Source: "/run/xtables.lock", Path: "/run/xtables.lock"})
	}
	for _, d := range []string{"run", "var", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("node root: %w", err)
		}
	}
	if err := os.Symlink("/run", filepath.Join(dir, "var/run")); err != nil {
		return nil, fmt.Errorf("node root: %w", err)
	}
	// Parents before children.
	binds = slices.Clone(binds)
	sort.SliceStable(binds, func(i, j int) bool {
		return strings.Count(filepath.Clean(binds[i].Path), "/") < strings.Count(filepath.Clean(binds[j].Path), "/")
	})
	for _, b := range append(system, binds...) {
		if err := BindInRoot(dir, b); err != nil {
			return nil, err
		}
	}
	if shared {
		if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
			return nil, fmt.Errorf("node root %s: shared: %w", dir, err)
		}
	}
	return undo, nil
}

// BindInRoot bind-mounts b.Source (not recursively) at b.Path inside the
// node root at dir, creating the mount point there.
func BindInRoot(dir string, b RootBind) error {
	target := filepath.Join(dir, b.Path)
	fi, err := os.Stat(b.Source)
	if err != nil {
		return fmt.Errorf("node root: %w", err)
	}
	if fi.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
			err = f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("node root: %w", err)
	}
	if err := unix.Mount(b.Source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("node root: bind %s at %s: %w", b.Source, b.Path, err)
	}
	if !b.Peer {
		if err := unix.Mount("", target, "", unix.MS_PRIVATE, ""); err != nil {
			return errors.Join(fmt.Errorf("node root: %s private: %w", b.Path, err), unix.Unmount(target, unix.MNT_DETACH))
		}
	}
	if b.ReadOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return errors.Join(fmt.Errorf("node root: %s read only: %w", b.Path, err), unix.Unmount(target, unix.MNT_DETACH))
		}
	}
	return nil
}
