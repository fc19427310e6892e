package k8sdeploy

import (
	"path/filepath"

	"github.com/nri-cni/nri-cni/test/harness"
)

// NodeFiles lists nri-cni's node-local traces of the sandboxes (by id):
// its records, libcni's cache entries (every network's) and host-local's
// address files of the example network. Empty once they are released.
func (o *Overlay) NodeFiles(ids ...string) []string {
	pc := harness.PluginConfig{StateDir: o.StateDir, CacheDir: o.CacheDir}
	sec := o.Secondary()
	out := append(pc.StateFilesOf(ids...), pc.CacheFilesOf(ids...)...)
	for _, ip := range sec.IPFilesOf(ids...) {
		out = append(out, filepath.Join(sec.IPAMDir, sec.Name, ip))
	}
	return out
}

// IPFilesOf lists host-local's address files of the sandboxes in the
// network whose CNI name is cniName (a NAD's: host-local's default data
// dir, /var/lib/cni/networks in nri-cni's container, is CacheDir/networks).
func (o *Overlay) IPFilesOf(cniName string, ids ...string) []string {
	s := harness.Secondary{Name: cniName, IPAMDir: filepath.Join(o.CacheDir, "networks")}
	return s.IPFilesOf(ids...)
}
