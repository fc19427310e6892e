package cluster

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// hostState is what one cluster changes on the host on its own (its node
// interface and cgroup root); the changes every kubelet makes to shared
// host state are in shared.go.
type hostState struct {
	link       string // node interface
	cgroupRoot string // e.g. /nricni-0a1b2c3d
}

// removeVarLogLinks removes the kubelet's /var/log/containers links into
// podLogs (the directory itself is shared: see shared.go).
func removeVarLogLinks(podLogs string) {
	entries, _ := os.ReadDir(varLogContainers)
	for _, e := range entries {
		p := filepath.Join(varLogContainers, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, podLogs+"/") {
			_ = os.Remove(p)
		}
	}
}

// addDummy creates the node's interface with a random 10.x address (/32:
// no route, nothing leaves the machine) and returns the address. It is a
// dummy interface, or, on kernels built without CONFIG_DUMMY (this CI's), a
// bridge with no ports, which serves the same purpose.
func (h *hostState) addDummy(name string) (net.IP, error) {
	var link netlink.Link = &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}
	err := netlink.LinkAdd(link)
	if errors.Is(err, unix.EOPNOTSUPP) {
		link = &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
		err = netlink.LinkAdd(link)
	}
	if err != nil {
		return nil, fmt.Errorf("adding node interface %s: %w", name, err)
	}
	h.link = name
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	host, _ := rand.Int(rand.Reader, big.NewInt(250))
	// 10.200-209.x.y: apart from the harness's primary (10.230-239) and
	// secondary networks.
	ip := net.IPv4(10, 200+b[0]%10, b[1], byte(host.Int64()+2)).To4()
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return nil, fmt.Errorf("address %s on %s: %w", ip, name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("setting %s up: %w", name, err)
	}
	return ip, nil
}

func (h *hostState) delDummy() error {
	if h.link == "" {
		return nil
	}
	link, err := netlink.LinkByName(h.link)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("finding %s: %w", h.link, err)
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("deleting %s: %w", h.link, err)
	}
	return nil
}

// cgroupHierarchies lists the mount points of the cgroup v1 hierarchies and,
// when mounted, the v2 one (hybrid), from /proc/self/mountinfo.
func cgroupHierarchies() (v1, v2 []string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mountpoint ... - fstype source options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 1 {
			continue
		}
		switch postFields[0] {
		case "cgroup":
			v1 = append(v1, fields[4])
		case "cgroup2":
			v2 = append(v2, fields[4])
		}
	}
	return v1, v2, sc.Err()
}

// makeCgroupRoot creates root in every v1 hierarchy (the kubelet's
// cgroupfs driver requires it to exist), copying cpuset.cpus/mems from the
// parent so that tasks can join.
func (h *hostState) makeCgroupRoot(root string) error {
	v1, _, err := cgroupHierarchies()
	if err != nil {
		return fmt.Errorf("cgroup hierarchies: %w", err)
	}
	if len(v1) == 0 {
		return errors.New("no cgroup v1 hierarchy mounted: the cluster harness is written for cgroup v1 hosts")
	}
	h.cgroupRoot = root
	for _, m := range v1 {
		d := filepath.Join(m, root)
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(m, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
				return fmt.Errorf("cgroup %s/%s: %w", d, f, err)
			}
		}
	}
	return nil
}

// removeCgroups removes the cgroup root and everything the kubelet and runc
// made below it, in every hierarchy (deepest first). Busy cgroups (a process
// left in them) are reported.
func (h *hostState) removeCgroups() error {
	if h.cgroupRoot == "" {
		return nil
	}
	v1, v2, err := cgroupHierarchies()
	if err != nil {
		return fmt.Errorf("cgroup hierarchies: %w", err)
	}
	var errs []error
	for _, m := range append(v1, v2...) {
		top := filepath.Join(m, h.cgroupRoot)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// CgroupRoot is the kubelet's cgroupRoot (e.g. /nricni-0a1b2c3d).
func (c *Cluster) CgroupRoot() string { return c.host.cgroupRoot }
