package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// Node stands in for a Kubernetes node when a test runs one of the
// DaemonSet's containers without a kubelet: every node path a hostPath
// volume names lives under HostDir, configMap volumes are written under
// VolumeDir, and the container's root filesystem is RootFS (the image,
// extracted).
type Node struct {
	HostDir   string
	VolumeDir string
	RootFS    string
}

// Mount is one bind mount a runtime would make for a container.
type Mount struct {
	Source, Target string // Target is a path on this machine (under RootFS for container mounts)
	File           bool   // a single file (subPath of a configMap)
	ReadOnly       bool
	Slave          bool // mountPropagation HostToContainer (rslave); else rprivate
}

// HostPath is where node path p lives on this machine.
func (n Node) HostPath(p string) string { return filepath.Join(n.HostDir, p) }

// PrepareVolumes does what the kubelet does before a container starts:
// creates the DirectoryOrCreate hostPath dirs and writes the configMap
// volumes' files.
func (n Node) PrepareVolumes(b *Base) error {
	for i, v := range b.DaemonSet.Spec.Template.Spec.Volumes {
		switch {
		case v.HostPath != nil:
			if err := os.MkdirAll(n.HostPath(v.HostPath.Path), 0o755); err != nil {
				return err
			}
		case v.ConfigMap != nil:
			files, err := b.ConfigMapFiles(&b.DaemonSet.Spec.Template.Spec.Volumes[i])
			if err != nil {
				return err
			}
			for p, data := range files {
				dst := filepath.Join(n.VolumeDir, v.Name, p)
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(dst, []byte(data), 0o644); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("volume %s: only hostPath and configMap volumes are simulated", v.Name)
		}
	}
	return nil
}

// ContainerMounts returns c's volume mounts as bind mounts into RootFS,
// parents before children, as a runtime orders them.
func (n Node) ContainerMounts(b *Base, c *corev1.Container) ([]Mount, error) {
	var out []Mount
	for _, vm := range c.VolumeMounts {
		v := b.Volume(vm.Name)
		if v == nil {
			return nil, fmt.Errorf("%s: mount %s names no volume", c.Name, vm.Name)
		}
		var src string
		switch {
		case v.HostPath != nil:
			src = n.HostPath(v.HostPath.Path)
		case v.ConfigMap != nil:
			src = filepath.Join(n.VolumeDir, v.Name)
		default:
			return nil, fmt.Errorf("volume %s: unsupported type", v.Name)
		}
		if vm.SubPath != "" {
			src = filepath.Join(src, vm.SubPath)
		}
		st, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("%s: mount %s: %w (PrepareVolumes first)", c.Name, vm.Name, err)
		}
		m := Mount{Source: src, Target: filepath.Join(n.RootFS, vm.MountPath), File: !st.IsDir(), ReadOnly: vm.ReadOnly}
		if vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationHostToContainer {
			m.Slave = true
		}
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out, nil
}

// RuntimeMounts are what every (privileged) container gets from the
// runtime besides its volumes: /proc (of the host PID namespace, as with
// hostPID), /sys and /dev.
func (n Node) RuntimeMounts() []Mount {
	var out []Mount
	for _, p := range []string{"/proc", "/sys", "/dev"} {
		out = append(out, Mount{Source: p, Target: filepath.Join(n.RootFS, p)})
	}
	return out
}

// Script is a shell script that makes the mounts and then execs argv
// chrooted into RootFS; see Command.
func (n Node) Script(mounts []Mount, argv []string) string {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, m := range mounts {
		t := quote(m.Target)
		if m.File {
			fmt.Fprintf(&b, "mkdir -p %s\n[ -e %s ] || : > %s\n", quote(filepath.Dir(m.Target)), t, t)
		} else {
			fmt.Fprintf(&b, "mkdir -p %s\n", t)
		}
		fmt.Fprintf(&b, "mount --rbind %s %s\n", quote(m.Source), t)
		if m.ReadOnly {
			fmt.Fprintf(&b, "mount -o remount,bind,ro %s\n", t)
		}
		// Propagation as a runtime sets it: HostToContainer is rslave,
		// None (the default) rprivate.
		if m.Slave {
			fmt.Fprintf(&b, "mount --make-rslave %s\n", t)
		} else {
			fmt.Fprintf(&b, "mount --make-rprivate %s\n", t)
		}
	}
	b.WriteString("exec chroot " + quote(n.RootFS))
	for _, a := range argv {
		b.WriteString(" " + quote(a))
	}
	b.WriteString("\n")
	return b.String()
}

// quote single-quotes s for sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Command is the process running a container's argv on the node: a new
// mount namespace whose mounts are slaves of the host's (nothing it mounts
// reaches the host; it all goes away with the process), the mounts, then
// chroot into RootFS and exec, so its pid ends up being argv's.
func (n Node) Command(ctx context.Context, mounts []Mount, argv []string) *exec.Cmd {
	return exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "slave", "--",
		"sh", "-c", n.Script(mounts, argv))
}

// PluginMounts are the mounts of the plugin container c on a node whose
// runtime listens on nriSocket and pins pod netns in netnsDir: the node
// side first (the socket at the node path c's --socket names, netnsDir at
// the node's /var/run/netns, the node's /proc, /sys and /dev, which CNI
// plugins chrooted into the node's root use), then the runtime's and c's
// own mounts. A runtime pinning outside /var/run/netns (as a test's does)
// reports pinned paths under netnsDir, so the container's /var/run/netns is
// also shown there, with that mount's propagation, and the node has
// netnsDir at that path too.
func (n Node) PluginMounts(b *Base, c *corev1.Container, nriSocket, netnsDir string) ([]Mount, error) {
	socket := ""
	for i, a := range c.Args {
		if a == "--socket" && i+1 < len(c.Args) {
			socket = c.Args[i+1]
		}
	}
	if socket == "" {
		return nil, fmt.Errorf("%s: no --socket in args %q", c.Name, c.Args)
	}
	own, err := n.ContainerMounts(b, c)
	if err != nil {
		return nil, err
	}
	mounts := []Mount{
		{Source: nriSocket, Target: n.HostPath(socket), File: true},
		{Source: netnsDir, Target: n.HostPath("/var/run/netns"), Slave: true},
	}
	for _, p := range []string{"/proc", "/sys", "/dev"} {
		mounts = append(mounts, Mount{Source: p, Target: n.HostPath(p)})
	}
	if netnsDir != "/var/run/netns" {
		mounts = append(mounts, Mount{Source: netnsDir, Target: n.HostPath(netnsDir), Slave: true})
	}
	mounts = append(append(mounts, n.RuntimeMounts()...), own...)
	if netnsDir != "/var/run/netns" {
		inner := filepath.Join(n.RootFS, "/var/run/netns")
		for _, m := range own {
			if m.Target == inner {
				return append(mounts, Mount{Source: inner, Target: filepath.Join(n.RootFS, netnsDir), Slave: m.Slave}), nil
			}
		}
		return nil, fmt.Errorf("%s: /var/run/netns is not mounted", c.Name)
	}
	return mounts, nil
}

// ShareMount makes dir a shared mount point (a bind mount onto itself) in
// the caller's mount namespace, so mounts made under it later reach the
// namespaces copied from this one with slave propagation. undo removes it.
func ShareMount(dir string) (undo func() error, err error) {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("bind %s: %w", dir, err)
	}
	undo = func() error { return unix.Unmount(dir, unix.MNT_DETACH) }
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		_ = undo()
		return nil, fmt.Errorf("make %s shared: %w", dir, err)
	}
	return undo, nil
}
