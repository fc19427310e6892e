package deviceinfo

// The device-info files (spec section 4), under one base directory
// (DefaultDir; tests use their own):
//
//	dp/<resourceName>-<deviceID>-device.json   a device plugin's or driver's, per device (4.1); read here
//	cni/<unique name>                          the NPWG implementation's, per attachment (4.2): seeded
//	                                           before ADD, handed to the chain as the CNIDeviceInfoFile
//	                                           capability, read back after it, removed at DEL
//
// "/" in a name component becomes "-" (resourceName, deviceID: as the spec
// and the NAD client library do; the CNI file's name as Multus makes it).
// Reads are bounded (MaxSize), take regular files only (no symlink, FIFO or
// device: O_NOFOLLOW, O_NONBLOCK) and validate (Parse). Writes are atomic
// (a temporary file renamed over the name) and write the validated,
// re-encoded document, so a CNI plugin reads exactly what was checked.
// Removals are idempotent. A Store holds no state: safe for concurrent use
// by attachments of different files.
//
// Dir is a host path. When nri-cni sees the host's / elsewhere (Root, nri.conf
// pluginRoot), the directory is resolved inside Root at each access
// (hostroot.Path): on Debian and Ubuntu nodes /var/run links to /run, and
// <Root>/var/run/... would otherwise lead to nri-cni's own container's /run,
// where no plugin or device plugin looks. Only the directory is resolved: a
// file's own name is never followed (reads O_NOFOLLOW, writes a new
// temporary file renamed over it, removals unlink the name); a directory on
// the way swapped for a symlink between the resolution and the access would
// be followed, which only root on the host can do (hostroot's package doc).

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nri-cni/nri-cni/hostroot"
)

// DefaultDir is the spec's base directory.
const DefaultDir = "/var/run/k8s.cni.cncf.io/devinfo"

// Subdirectories of the base directory.
const (
	DPSubdir  = "dp"
	CNISubdir = "cni"
)

// maxFileName is the longest file name Linux file systems take.
const maxFileName = 255

// ErrName: a component of a file name is empty or holds a NUL byte, or the
// name would be too long.
var ErrName = errors.New("invalid device-info file name")

// Store reads and writes device-info files under Dir ("" = DefaultDir), a
// host path: the paths it hands out (DPPath, CNIPath) are the host's.
type Store struct {
	Dir string
	// Root is where nri-cni sees the host's / ("" = its own /): with the
	// plugins chrooted into the host's / mounted at /host (nri.conf
	// pluginRoot), Root is /host and Dir /var/run/…; nri-cni reads and
	// writes Dir resolved inside Root.
	Root string
}

// Attachment names one network attachment, whose CNI device-info file is
// its own: the network's name, the container (sandbox) ID and the
// interface name in it.
type Attachment struct {
	Network, ContainerID, IfName string
}

func (s Store) dir() string {
	if s.Dir == "" {
		return DefaultDir
	}
	return s.Dir
}

// DPPath is the device plugin file of a device (a host path): resourceName
// is the resource (the NAD's k8s.v1.cni.cncf.io/resourceName, the device's
// k8s.cni.cncf.io/resourceName attribute), deviceID the device's ID.
func (s Store) DPPath(resourceName, deviceID string) (string, error) {
	name, err := dpName(resourceName, deviceID)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.dir(), DPSubdir, name), nil
}

func dpName(resourceName, deviceID string) (string, error) {
	if err := nameParts(resourceName, deviceID); err != nil {
		return "", err
	}
	name := clean(resourceName) + "-" + clean(deviceID) + "-device.json"
	if len(name) > maxFileName {
		return "", fmt.Errorf("%w: resource %q device %q make a name longer than %d bytes", ErrName, printable(resourceName), printable(deviceID), maxFileName)
	}
	return name, nil
}

// dpFile is the device's device plugin file where nri-cni reads it.
func (s Store) dpFile(resourceName, deviceID string) (string, error) {
	name, err := dpName(resourceName, deviceID)
	if err != nil {
		return "", err
	}
	return s.file(DPSubdir, name)
}

// file is subdir's file name as nri-cni opens it: the directory resolved
// inside Root, the name as it is.
func (s Store) file(subdir, name string) (string, error) {
	dir, err := hostroot.Path(s.Root, filepath.Join(s.dir(), subdir))
	if err != nil {
		return "", fmt.Errorf("device-info directory %s under %s: %w", filepath.Join(s.dir(), subdir), s.Root, err)
	}
	return filepath.Join(dir, name), nil
}

// ReadDP reads and validates a device's device plugin file. Without one
// the error wraps fs.ErrNotExist.
func (s Store) ReadDP(resourceName, deviceID string) (*DeviceInfo, error) {
	p, err := s.dpFile(resourceName, deviceID)
	if err != nil {
		return nil, err
	}
	return readFile(p)
}

// WriteDP writes a device's device plugin file (a DRA driver or device
// plugin does; the tests' fake driver does).
func (s Store) WriteDP(resourceName, deviceID string, d *DeviceInfo) error {
	p, err := s.dpFile(resourceName, deviceID)
	if err != nil {
		return err
	}
	return writeFile(p, d)
}

// RemoveDP removes a device's device plugin file; absent is fine.
func (s Store) RemoveDP(resourceName, deviceID string) error {
	p, err := s.dpFile(resourceName, deviceID)
	if err != nil {
		return err
	}
	return remove(p)
}

// CNIPath is the CNI device-info file of an attachment as the plugins see
// it (a host path), the value of the CNIDeviceInfoFile capability:
// cni/<network>-<containerID>_<ifName> (Multus's naming). A network name
// that would make the name longer than 255 bytes is cut and followed by 16
// hex digits of its SHA-256, so the name stays unique per attachment.
func (s Store) CNIPath(a Attachment) (string, error) {
	name, err := cniName(a)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.dir(), CNISubdir, name), nil
}

// cniFile is the attachment's CNI file where nri-cni reads and writes it.
func (s Store) cniFile(a Attachment) (string, error) {
	name, err := cniName(a)
	if err != nil {
		return "", err
	}
	return s.file(CNISubdir, name)
}

func cniName(a Attachment) (string, error) {
	if err := nameParts(a.Network, a.ContainerID, a.IfName); err != nil {
		return "", err
	}
	network, rest := clean(a.Network), "-"+clean(a.ContainerID)+"_"+clean(a.IfName)
	if len(network)+len(rest) > maxFileName {
		sum := sha256.Sum256([]byte(a.Network))
		suffix := "#" + hex.EncodeToString(sum[:8])
		keep := maxFileName - len(rest) - len(suffix)
		if keep < 1 {
			return "", fmt.Errorf("%w: container %q interface %q make a name longer than %d bytes", ErrName, printable(a.ContainerID), a.IfName, maxFileName)
		}
		network = cutUTF8(network, keep) + suffix
	}
	return network + rest, nil
}

// WriteCNI writes an attachment's CNI file (before the chain's ADD).
func (s Store) WriteCNI(a Attachment, d *DeviceInfo) error {
	p, err := s.cniFile(a)
	if err != nil {
		return err
	}
	return writeFile(p, d)
}

// ReadCNI reads and validates an attachment's CNI file (after the chain's
// ADD, which may have written or updated it). Without one the error wraps
// fs.ErrNotExist.
func (s Store) ReadCNI(a Attachment) (*DeviceInfo, error) {
	p, err := s.cniFile(a)
	if err != nil {
		return nil, err
	}
	return readFile(p)
}

// RemoveCNI removes an attachment's CNI file (at DEL); absent is fine.
func (s Store) RemoveCNI(a Attachment) error {
	p, err := s.cniFile(a)
	if err != nil {
		return err
	}
	return remove(p)
}

// SeedCNI prepares an attachment's CNI file before ADD (spec 4.2.1): the
// device plugin file of (resourceName, deviceID) when there is one (both
// given), else fallback (e.g. what the DRA resolver derived from the
// driver's data), else no file. It returns the file's path as the
// plugins see it (the CNIDeviceInfoFile capability's value, also when no
// file was written: a plugin may write it) and what it wrote (nil:
// nothing). A device plugin file that is there but invalid is an error,
// not silently replaced.
func (s Store) SeedCNI(a Attachment, resourceName, deviceID string, fallback *DeviceInfo) (string, *DeviceInfo, error) {
	pp, err := s.CNIPath(a)
	if err != nil {
		return "", nil, err
	}
	p, err := s.cniFile(a)
	if err != nil {
		return pp, nil, err
	}
	d := fallback
	if resourceName != "" && deviceID != "" {
		dp, err := s.ReadDP(resourceName, deviceID)
		switch {
		case err == nil:
			d = dp
		case !errors.Is(err, fs.ErrNotExist):
			return pp, nil, err
		}
	}
	if d == nil {
		// A stale file of an earlier ADD of the same attachment must not
		// be reported as this one's.
		return pp, nil, remove(p)
	}
	if err := writeFile(p, d); err != nil {
		return pp, nil, err
	}
	return pp, d, nil
}

func nameParts(parts ...string) error {
	for _, p := range parts {
		if p == "" || strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("%w: empty or NUL in %q", ErrName, printable(p))
		}
	}
	return nil
}

func clean(s string) string { return strings.ReplaceAll(s, "/", "-") }

// cutUTF8 returns at most n bytes of s, not splitting a UTF-8 sequence.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// readFile reads a regular file of at most MaxSize bytes and parses it.
func readFile(p string) (*DeviceInfo, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("device-info file %s: a symbolic link, not read", p)
		}
		return nil, fmt.Errorf("device-info file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("device-info file: %w", err)
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("device-info file %s: not a regular file (%s)", p, st.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("device-info file: %w", err)
	}
	d, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("device-info file %s: %w", p, err)
	}
	return d, nil
}

// writeFile writes d (validated, re-encoded) atomically, creating the
// directory.
func writeFile(p string, d *DeviceInfo) (err error) {
	data, err := d.Marshal()
	if err != nil {
		return fmt.Errorf("device-info file %s: %w", p, err)
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("device-info file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return fmt.Errorf("device-info file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("device-info file %s: %w", p, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("device-info file %s: %w", p, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("device-info file %s: %w", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("device-info file: %w", err)
	}
	return nil
}

func remove(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("device-info file: %w", err)
	}
	return nil
}
