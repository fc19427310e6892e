package cli

// How node-setup changes a node's files: every host path resolved inside
// the root (nodeconf.HostPath); a file replaced atomically (a temporary
// file, fsync, rename, fsync of the directory, so a crash leaves the old
// file or the new one, and the new one survives a power loss); the file it
// replaces kept as a backup first; nothing of its own left in a runtime's
// drop-in dir, which the runtime reads as config (CRI-O reads every file of
// crio.conf.d, containerd every file an imports glob matches).

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nri-cni/nri-cni/nodeconf"
)

// nodeWriter writes node-setup's files under root and records one line per
// file changed.
type nodeWriter struct {
	root    string
	force   bool      // replace a drop-in edited since node-setup wrote it
	now     time.Time // names the backups
	syncDir func(dir string) error
	changes []string
}

// backupSuffix joins a file's name and its backup's timestamp.
const backupSuffix = ".nri-cni-backup-"

// dropIn installs nri-cni's drop-in want at host path p (want as shipped;
// it is written with nodeconf's marker). One already there is left alone
// when it is current, replaced when node-setup wrote it and nobody changed
// it since, and otherwise replaced only with force.
func (w *nodeWriter) dropIn(p string, want []byte, what string) error {
	real, err := w.path(p)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(real)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case nodeconf.JudgeDropIn(old, want) == nodeconf.DropInCurrent:
		return nil
	case nodeconf.JudgeDropIn(old, want) == nodeconf.DropInEdited && !w.force:
		return fmt.Errorf("%s differs from what node-setup wrote (edited by hand, or written by another tool): it is left as it is. "+
			"Put your own settings in a drop-in of your own that is read after it, then run node-setup again with --force "+
			"to replace it (the file is kept as a backup); or leave it and check it with `nri-cni node-setup --check`", p)
	}
	return w.write(p, nodeconf.MarkDropIn(want), path.Dir(p), "written ("+what+")")
}

// write puts data at host path p atomically unless p already holds it;
// dropInDir ("" = none) is the runtime's drop-in dir p is in: the temporary
// file and the backup go to the dir above it. A file that exists keeps its
// mode and is backed up first; a new one is 0644, its directory created
// 0755. A symlink is not replaced (its target may be elsewhere): that is an
// error naming it.
func (w *nodeWriter) write(p string, data []byte, dropInDir, how string) error {
	real, err := w.path(p)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(real)
	if err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	mode := os.FileMode(0o644)
	existed := false
	if st, err := os.Lstat(real); err == nil {
		if st.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink: node-setup replaces regular files only; change its target yourself", p)
		}
		mode, existed = st.Mode().Perm(), true
	}
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		return err
	}
	aside, asideHost := filepath.Dir(real), path.Dir(p)
	if dropInDir != "" {
		aside, asideHost = filepath.Dir(aside), path.Dir(asideHost)
	}
	line := p + ": " + how
	if existed {
		name, err := w.backup(real, aside, old, mode)
		if err != nil {
			return fmt.Errorf("%s: keeping a backup: %w", p, err)
		}
		line += "; the previous file is kept as " + path.Join(asideHost, name)
	}
	if err := w.replace(real, aside, data, mode); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	w.changes = append(w.changes, line)
	return nil
}

// path is where host path p is under the root: its directory resolved as
// the host resolves it (nodeconf.HostPath), its last component as it is (a
// symlink there is refused by write, not followed).
func (w *nodeWriter) path(p string) (string, error) {
	dir, err := nodeconf.HostPath(w.root, path.Dir(p))
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return filepath.Join(dir, path.Base(p)), nil
}

// backup writes old (the content of file real) into dir as
// <name>.nri-cni-backup-<UTC time>, never over an earlier backup, and
// returns its name.
func (w *nodeWriter) backup(real, dir string, old []byte, mode os.FileMode) (string, error) {
	base := filepath.Base(real) + backupSuffix + w.now.Format("20060102T150405Z")
	for i := 0; ; i++ {
		name := base
		if i > 0 {
			name += "." + strconv.Itoa(i)
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, fs.ErrExist) && i < 100 {
			continue
		}
		if err != nil {
			return "", err
		}
		if err := writeSynced(f, old); err != nil {
			return "", err
		}
		return name, w.syncDir(dir)
	}
}

// replace writes data to real through a temporary file in dir (real's
// directory, or the one above a drop-in dir), renamed over real; then it
// syncs the directories whose entries changed.
func (w *nodeWriter) replace(real, dir string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(real)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := writeSynced(tmp, data); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), real); err != nil {
		return err
	}
	if err := w.syncDir(filepath.Dir(real)); err != nil {
		return err
	}
	if dir != filepath.Dir(real) {
		return w.syncDir(dir) // the temporary file's entry went away from it
	}
	return nil
}

// writeSynced writes data to f, syncs and closes it.
func writeSynced(f *os.File, data []byte) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// syncDir makes a directory's entries durable (a rename in it, a file
// created in it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
