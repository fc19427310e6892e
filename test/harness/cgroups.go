package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
)

// PodCgroupParent is the cgroup parent the CRI clients of the runtime at
// socket give their pods (cgroupfs): one per runtime, so that its Close can
// remove it without touching another runtime's pods.
func PodCgroupParent(socket string) string {
	sum := sha256.Sum256([]byte(socket))
	return "/nri-cni-pods-" + hex.EncodeToString(sum[:6])
}

// removePodCgroupParent removes the pods' cgroup parent of the runtime at
// socket in every mounted hierarchy (after its pods are gone; a cgroup
// that still holds a process is refused by the kernel and reported).
func removePodCgroupParent(socket string) error { return RemoveCgroupParent(PodCgroupParent(socket)) }

// RemoveCgroupParent removes the cgroup parent (a path from the root of
// each hierarchy, e.g. "/nri-cni-x") with everything below it in every
// mounted hierarchy, where it exists.
func RemoveCgroupParent(parent string) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	var errs []error
	for _, r := range roots {
		dir := filepath.Join(r, parent)
		if _, err := os.Stat(dir); err == nil {
			errs = append(errs, removeCgroup(dir))
		}
	}
	return errors.Join(errs...)
}
