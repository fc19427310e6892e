package nodeconf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/nri-cni/nri-cni/hostroot"
)

// HostPath is where host path p is seen under root (the host's /, e.g.
// "/host" in a container; "" or "/": this machine is the host). Every
// symlink on the way is resolved as the host resolves it: an absolute
// target starts again at root and ".." stops there, so /var/run -> /run
// leads to <root>/run, never to this machine's own /run. Components that do
// not exist yet are joined as they are (a file about to be written).
//
// It is the one place nodeconf, node-setup and the node check join a host
// path to the root.
func HostPath(root, p string) (string, error) { return hostroot.Path(root, p) }

// fsOf is o's view of the host's /: o.FS, else root resolved with HostPath.
func fsOf(o Options) fs.FS {
	if o.FS != nil {
		return o.FS
	}
	return hostroot.FS(o.Root)
}

// rel turns a host path into a path in fsys (fs.FS paths have no leading /).
func rel(hostPath string) string {
	p := strings.TrimPrefix(path.Clean(filepath.ToSlash(hostPath)), "/")
	if p == "" {
		return "."
	}
	return p
}

// CheckExecutable reports why the host could not run the program at host
// path p under root (nil: a regular file with an execute bit, which the
// runtime, as root, may run): missing, not a regular file, or no execute
// bit. Only a stat: cheap enough for every use.
func CheckExecutable(root, p string) error {
	real, err := HostPath(root, p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	fi, err := os.Stat(real)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s is missing on the node", p)
	case err != nil:
		return fmt.Errorf("%s: %w", p, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%s)", p, fi.Mode().Type())
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable (mode %04o)", p, fi.Mode().Perm())
	}
	return nil
}
