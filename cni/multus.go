package cni

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// MultusTypes are the plugin types of Multus (thin plugin, thick shim).
var MultusTypes = []string{"multus", "multus-shim"}

// MultusDetector tells whether Multus is the runtime's primary network on
// this node: the first config file (by name, as containerd and CRI-O pick
// it) of the runtime's CNI config dir has a Multus plugin. Multus then owns
// the NPWG annotation and the pods' network-status.
//
// The answer is cached against the dir's modification time (files added,
// removed or renamed into place, as Multus installs its config), so a call
// costs one stat. Safe for concurrent use.
type MultusDetector struct {
	dir string

	mu    sync.Mutex // guards mtime and file
	mtime time.Time
	file  string
	known bool
}

// NewMultusDetector watches dir (the runtime's CNI config dir).
func NewMultusDetector(dir string) *MultusDetector { return &MultusDetector{dir: dir} }

// Primary returns the path of the Multus config that is the runtime's
// primary network, or "" when Multus is not (or the dir is unreadable).
func (d *MultusDetector) Primary() string {
	st, err := os.Stat(d.dir)
	if err != nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.known && st.ModTime().Equal(d.mtime) {
		return d.file
	}
	d.mtime, d.file, d.known = st.ModTime(), multusPrimary(d.dir), true
	return d.file
}

// multusPrimary reads the first config of dir.
func multusPrimary(dir string) string {
	files, err := libcni.ConfFiles(dir, Extensions)
	if err != nil || len(files) == 0 {
		return ""
	}
	n, err := LoadFile(files[0])
	if err != nil {
		return ""
	}
	for _, p := range n.List.Plugins {
		for _, t := range MultusTypes {
			if p.Network.Type == t {
				return filepath.Clean(files[0])
			}
		}
	}
	return ""
}
