// Package hostroot is the host's root directory as nri-cni sees it: where a
// host path is found when the host's / is mounted elsewhere (nri.conf
// pluginRoot and failClosed.nodeRoot: /host in the DaemonSet), and whether
// nri-cni sees the host's processes there (CheckPIDs).
//
// A host path joined under the root is not where the host has it when a
// component on the way is an absolute symlink: on Debian and Ubuntu (kind's
// nodes too) /var/run is a link to /run, and /host/var/run/x opened by
// nri-cni leads to its own container's /run/x, where no plugin on the host
// and nothing chrooted into the root looks. Path resolves every symlink on
// the way inside the root, as the kernel does for a process chrooted into
// it (the CNI plugins nri-cni runs there): an absolute target starts again
// at the root, ".." stops at it. It uses filepath-securejoin's SecureJoin.
//
// What it does not guard against: a symlink swapped in on the way after
// Path returned is followed by the open that comes after (a time-of-check
// race; the directories it resolves are the host's own, which only root on
// the host and privileged node agents write). Callers that write name the
// last component themselves and never follow it (O_NOFOLLOW, O_EXCL, a
// rename over it): see deviceinfo.
package hostroot

import (
	"io/fs"
	"os"
	"path/filepath"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// On reports whether root is somewhere other than nri-cni's own / ("" and
// "/" are its own: host paths are used as they are).
func On(root string) bool { return root != "" && filepath.Clean(root) != "/" }

// Path returns where nri-cni finds the host's path p: p itself when root is
// its own / (On false), else root joined with p after every symlink on the
// way was resolved inside root. Components that do not exist (yet) are
// taken as they are, so a directory still to be made resolves too. Errors:
// a symlink loop (ELOOP), a component that cannot be read.
func Path(root, p string) (string, error) {
	if !On(root) {
		return p, nil
	}
	return securejoin.SecureJoin(filepath.Clean(root), p)
}

// FS is the host's / at root as an fs.FS whose names are host paths
// without the leading "/", each resolved inside root (Path) when it is
// opened. With root its own /, os.DirFS("/").
func FS(root string) fs.FS {
	if !On(root) {
		return os.DirFS("/")
	}
	return rootFS(filepath.Clean(root))
}

type rootFS string

func (r rootFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	p, err := Path(string(r), "/"+name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.Open(p)
}
