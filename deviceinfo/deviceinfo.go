// Package deviceinfo is the NPWG Device Information Specification v1.1.0
// (github.com/k8snetworkplumbingwg/device-info-spec, SPEC.md): the
// "device-info" object a device plugin or DRA driver writes for a device,
// an NPWG implementation copies for the CNI chain and reports in the pod's
// network-status entry.
//
// This file: the types, Parse and Validate. store.go: the files (the device
// plugin's under dp/, the CNI side's under cni/).
//
// Parse reads input other programs wrote (a device plugin's or driver's
// file, a CNI plugin's update of the CNI file): it is bounded (MaxSize),
// takes exactly one JSON object, and checks what the spec requires and
// what a consumer relies on (the type and its section, version 1.x.y, PCI
// addresses in BDF form, absolute paths, the enumerated values). Keys the
// spec does not define are ignored, as minor versions add keys (1.1.0 added
// representor-device). The package has no dependencies beyond the standard
// library, so any layer may use it.
package deviceinfo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Version is the spec version this package writes.
const Version = "1.1.0"

// Device types (spec 3.1.1). The spec defines these four; there is no
// "auxiliary" type in v1.1.0 (an auxiliary device's ID still goes to the
// CNI chain as runtimeConfig.deviceID, with no device-info).
const (
	TypePCI       = "pci"
	TypeVDPA      = "vdpa"
	TypeVhostUser = "vhost-user"
	TypeMemif     = "memif"
)

// Enumerated values (spec 3.1.4.2, 3.1.5.1, 3.1.6.1, 3.1.6.3).
const (
	VDPADriverVhost  = "vhost"
	VDPADriverVirtio = "virtio"

	VhostModeClient = "client"
	VhostModeServer = "server"

	MemifRoleMaster = "master"
	MemifRoleSlave  = "slave"

	MemifModeEthernet = "ethernet"
	MemifModeIP       = "ip"
	MemifModePunt     = "inject-punt"
	// memifModePuntAlt is the NAD client library's spelling of the
	// reserved mode ("punt"); accepted when read.
	memifModePuntAlt = "punt"
)

// MaxSize bounds a device-info document (a file or an annotation value):
// the largest a spec-conforming one gets is well under 4 KiB.
const MaxSize = 16 << 10

// maxString bounds every string member (a path is at most PATH_MAX).
const maxString = 4096

// Errors. Every error of Parse and Validate wraps ErrInvalid.
var (
	ErrInvalid     = errors.New("invalid device-info")
	ErrTooLarge    = errors.New("device-info larger than deviceinfo.MaxSize")
	ErrUnknownType = errors.New("unknown device-info type")
	ErrVersion     = errors.New("unsupported device-info version")
)

// DeviceInfo is the "device-info" map (spec 3.1). Exactly the section
// named by Type must be set; the spec allows the others, which are kept
// as read.
type DeviceInfo struct {
	Type      string     `json:"type"`
	Version   string     `json:"version"`
	PCI       *PCI       `json:"pci,omitempty"`
	VDPA      *VDPA      `json:"vdpa,omitempty"`
	VhostUser *VhostUser `json:"vhost-user,omitempty"`
	Memif     *Memif     `json:"memif,omitempty"`
}

// PCI is a PCI device (spec 3.1.3).
type PCI struct {
	PCIAddress        string `json:"pci-address"`
	VhostNet          string `json:"vhost-net,omitempty"`
	RDMADevice        string `json:"rdma-device,omitempty"`
	PFPCIAddress      string `json:"pf-pci-address,omitempty"`
	RepresentorDevice string `json:"representor-device,omitempty"`
}

// VDPA is a vDPA device (spec 3.1.4). Path is required by the spec, but
// the SR-IOV device plugin omits it for virtio-vDPA devices, so Validate
// accepts it empty.
type VDPA struct {
	ParentDevice      string `json:"parent-device"`
	Driver            string `json:"driver"`
	Path              string `json:"path,omitempty"`
	PCIAddress        string `json:"pci-address,omitempty"`
	PFPCIAddress      string `json:"pf-pci-address,omitempty"`
	RepresentorDevice string `json:"representor-device,omitempty"`
}

// VhostUser is a vhost-user socket (spec 3.1.5).
type VhostUser struct {
	Mode string `json:"mode"`
	Path string `json:"path"`
}

// Memif is a memif socket (spec 3.1.6).
type Memif struct {
	Role string `json:"role"`
	Path string `json:"path"`
	Mode string `json:"mode"`
}

// NewPCI returns the device-info of a PCI device at addr (BDF), for a
// device whose driver or plugin wrote none.
func NewPCI(addr string) *DeviceInfo {
	return &DeviceInfo{Type: TypePCI, Version: Version, PCI: &PCI{PCIAddress: addr}}
}

// Parse reads one device-info document: at most MaxSize bytes, a single
// JSON object, valid (Validate).
func Parse(data []byte) (*DeviceInfo, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %w (%d bytes)", ErrInvalid, ErrTooLarge, len(data))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var di DeviceInfo
	if err := dec.Decode(&di); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrInvalid)
	}
	if err := di.Validate(); err != nil {
		return nil, err
	}
	return &di, nil
}

// jsonError describes a decoding error without quoting the input.
func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return "not JSON (offset " + strconv.FormatInt(se.Offset, 10) + ")"
	case errors.As(err, &te):
		if te.Field == "" {
			return "not a JSON object"
		}
		return fmt.Sprintf("%q is not a %s", te.Field, te.Type)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "empty or truncated"
	}
	return "not a device-info object"
}

// Validate checks d against the spec: a known type, a 1.x.y version, the
// type's section with its required keys, well-formed values.
func (d *DeviceInfo) Validate() error {
	if d == nil {
		return fmt.Errorf("%w: none", ErrInvalid)
	}
	if err := checkVersion(d.Version); err != nil {
		return err
	}
	var err error
	switch d.Type {
	case TypePCI:
		if d.PCI == nil {
			return fmt.Errorf("%w: type %q without its %q section", ErrInvalid, d.Type, "pci")
		}
	case TypeVDPA:
		if d.VDPA == nil {
			return fmt.Errorf("%w: type %q without its %q section", ErrInvalid, d.Type, "vdpa")
		}
	case TypeVhostUser:
		if d.VhostUser == nil {
			return fmt.Errorf("%w: type %q without its %q section", ErrInvalid, d.Type, "vhost-user")
		}
	case TypeMemif:
		if d.Memif == nil {
			return fmt.Errorf("%w: type %q without its %q section", ErrInvalid, d.Type, "memif")
		}
	case "":
		return fmt.Errorf("%w: no %q", ErrInvalid, "type")
	default:
		return fmt.Errorf("%w: %w %q (the spec's: pci, vdpa, vhost-user, memif)", ErrInvalid, ErrUnknownType, printable(d.Type))
	}
	// Every section present is checked, the type's and any other.
	if d.PCI != nil {
		err = errors.Join(err, d.PCI.validate())
	}
	if d.VDPA != nil {
		err = errors.Join(err, d.VDPA.validate())
	}
	if d.VhostUser != nil {
		err = errors.Join(err, d.VhostUser.validate())
	}
	if d.Memif != nil {
		err = errors.Join(err, d.Memif.validate())
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// versionRE: MAJOR.MINOR.PATCH (spec 3.1.2), numbers without leading zeros.
var versionRE = regexp.MustCompile(`^(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})$`)

func checkVersion(v string) error {
	m := versionRE.FindStringSubmatch(v)
	switch {
	case v == "":
		return fmt.Errorf("%w: no %q", ErrInvalid, "version")
	case m == nil:
		return fmt.Errorf("%w: version %q is not MAJOR.MINOR.PATCH", ErrInvalid, printable(v))
	case m[1] != "1":
		return fmt.Errorf("%w: %w %q (this reads 1.x.y)", ErrInvalid, ErrVersion, v)
	}
	return nil
}

func (p *PCI) validate() error {
	return errors.Join(
		checkBDF("pci.pci-address", p.PCIAddress, true),
		checkBDF("pci.pf-pci-address", p.PFPCIAddress, false),
		checkPath("pci.vhost-net", p.VhostNet, false),
		checkName("pci.rdma-device", p.RDMADevice),
		checkName("pci.representor-device", p.RepresentorDevice),
	)
}

func (v *VDPA) validate() error {
	var err error
	if v.ParentDevice == "" {
		err = fmt.Errorf("no %q", "vdpa.parent-device")
	}
	if v.Driver != VDPADriverVhost && v.Driver != VDPADriverVirtio {
		err = errors.Join(err, fmt.Errorf("%q is %q, not %q or %q", "vdpa.driver", printable(v.Driver), VDPADriverVhost, VDPADriverVirtio))
	}
	return errors.Join(err,
		checkName("vdpa.parent-device", v.ParentDevice),
		checkPath("vdpa.path", v.Path, false),
		checkBDF("vdpa.pci-address", v.PCIAddress, false),
		checkBDF("vdpa.pf-pci-address", v.PFPCIAddress, false),
		checkName("vdpa.representor-device", v.RepresentorDevice),
	)
}

func (v *VhostUser) validate() error {
	var err error
	if v.Mode != VhostModeClient && v.Mode != VhostModeServer {
		err = fmt.Errorf("%q is %q, not %q or %q", "vhost-user.mode", printable(v.Mode), VhostModeClient, VhostModeServer)
	}
	return errors.Join(err, checkPath("vhost-user.path", v.Path, true))
}

func (m *Memif) validate() error {
	var err error
	if m.Role != MemifRoleMaster && m.Role != MemifRoleSlave {
		err = fmt.Errorf("%q is %q, not %q or %q", "memif.role", printable(m.Role), MemifRoleMaster, MemifRoleSlave)
	}
	switch m.Mode {
	case MemifModeEthernet, MemifModeIP, MemifModePunt, memifModePuntAlt:
	default:
		err = errors.Join(err, fmt.Errorf("%q is %q, not %q, %q or %q", "memif.mode", printable(m.Mode),
			MemifModeEthernet, MemifModeIP, MemifModePunt))
	}
	return errors.Join(err, checkPath("memif.path", m.Path, true))
}

// bdfRE is a PCI address in BDF form, "dddd:BB:DD.f" (spec 3.1.3.1): a
// domain of 4 hex digits (up to 8: VMD domains are 10000 and up), bus,
// device (00-1f) and function (0-7).
var bdfRE = regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[01][0-9a-fA-F]\.[0-7]$`)

// IsPCIAddress reports whether s is a PCI address in BDF form.
func IsPCIAddress(s string) bool { return bdfRE.MatchString(s) }

func checkBDF(key, v string, required bool) error {
	switch {
	case v == "" && required:
		return fmt.Errorf("no %q", key)
	case v == "":
		return nil
	case !IsPCIAddress(v):
		return fmt.Errorf("%q is %q, not a PCI address (dddd:BB:DD.f)", key, printable(v))
	}
	return nil
}

func checkPath(key, v string, required bool) error {
	switch {
	case v == "" && required:
		return fmt.Errorf("no %q", key)
	case v == "":
		return nil
	case !strings.HasPrefix(v, "/"):
		return fmt.Errorf("%q is %q, not an absolute path", key, printable(v))
	}
	return checkText(key, v)
}

// checkName checks a name (a device, an RDMA device list "mlx5_0,mlx5_1").
func checkName(key, v string) error {
	if strings.ContainsAny(v, "/ ") {
		return fmt.Errorf("%q is %q, not a device name", key, printable(v))
	}
	return checkText(key, v)
}

// checkText refuses what would garble a log line or a file name: control
// characters, invalid UTF-8, overlong values.
func checkText(key, v string) error {
	if len(v) > maxString {
		return fmt.Errorf("%q is longer than %d bytes", key, maxString)
	}
	for _, r := range v {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return fmt.Errorf("%q holds a control character or invalid UTF-8", key)
		}
	}
	return nil
}

// printable quotes at most 64 bytes of v for an error message.
func printable(v string) string {
	if len(v) > 64 {
		return v[:64] + "…"
	}
	return v
}

// Marshal returns d's JSON (validated first).
func (d *DeviceInfo) Marshal() ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(d)
}
