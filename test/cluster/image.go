package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// TagImage gives the image src a second reference dst in containerd's
// k8s.io namespace: a "new version" to roll a DaemonSet out to without a
// registry. (Not on a CRI-O node: the upgrade tests run on containerd.)
func (c *Cluster) TagImage(ctx context.Context, src, dst string) error {
	var cmd *exec.Cmd
	switch {
	case c.Containerd != nil:
		cmd = exec.CommandContext(ctx, filepath.Join(c.rtTools.ContainerdDir, "ctr"), "--address", c.Containerd.Address,
			"-n", "k8s.io", "images", "tag", "--force", src, dst)
	default:
		return fmt.Errorf("tagging %s: containerd nodes only", src)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images tag %s %s: %w: %s", src, dst, err, out)
	}
	return nil
}
