package state

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ProcessLock takes a lock on the state dir shared between processes (hook
// invocations are separate processes): shared for ADD/DEL, exclusive for GC.
// It blocks until granted; call the returned function to release it.
func (s *Store) ProcessLock(exclusive bool) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_RDONLY|os.O_CREATE, fileMod)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("state lock: %w", err)
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}
