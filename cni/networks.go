package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
)

// Network is one CNI network config loaded from the config directory.
type Network struct {
	Name string
	File string
	List *libcni.NetworkConfigList
	// ResourceName is the device plugin resource whose device, allocated
	// to the pod by the kubelet, the network takes (a
	// NetworkAttachmentDefinition's k8s.v1.cni.cncf.io/resourceName); ""
	// for none.
	ResourceName string
	// DeviceClaim names the ResourceClaim request of the pod whose device
	// the network takes (a NetworkAttachmentDefinition's
	// nri-cni.io/resourceClaim); zero for none. At most one of
	// ResourceName and DeviceClaim is set.
	DeviceClaim ClaimRequest
}

// ClaimRequest names a request of one of the pod's ResourceClaims: Claim
// is the pod's name for the claim (spec.resourceClaims[].name, which a
// claim made from a template carries in its
// resource.kubernetes.io/pod-claim-name annotation) or the ResourceClaim's
// own name; Request is the claim's request ("req" or "req/sub").
type ClaimRequest struct {
	Claim, Request string
}

// IsZero reports whether r names no request.
func (r ClaimRequest) IsZero() bool { return r.Claim == "" }

// String is "claim/request".
func (r ClaimRequest) String() string { return r.Claim + "/" + r.Request }

// derived is n (its name, file and device fields) with list.
func (n *Network) derived(list *libcni.NetworkConfigList) *Network {
	return &Network{Name: n.Name, File: n.File, List: list, ResourceName: n.ResourceName, DeviceClaim: n.DeviceClaim}
}

// Extensions nri-cni reads from the config directory, as the kubelet does.
var Extensions = []string{".conf", ".conflist", ".json"}

// ConfigFileName is nri-cni's own config file (nri.conf). LoadDir never
// reads a file of that name as a network: deploy/base and the Helm chart
// mount their whole ConfigMap (nri.conf and every network, so that a key
// an admin adds appears in confDir) as the config directory.
const ConfigFileName = "nri.conf"

// LoadDir reads every config in dir (sorted by file name), validates each with
// libcni (plugin binaries present, CNI versions supported) and returns the
// valid ones (with c nil, files are only parsed, not validated). Each skipped
// file gets one error in skipped, naming the file. A network name used twice
// keeps its first file. An unreadable dir is err (ErrNoConfDir when it does
// not exist). ConfigFileName is not a
// network, and neither is what a ConfigMap volume keeps beside its keys
// (the "..data" link and the "..<timestamp>" directory it points to: their
// names have no config extension, and directories are never read).
func LoadDir(ctx context.Context, c libcni.CNI, dir string) (nets []*Network, skipped []error, err error) {
	// libcni treats a missing dir as empty; a mistyped confDir must not.
	if st, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: %w", ErrNoConfDir, err)
	} else if err != nil {
		return nil, nil, fmt.Errorf("CNI config dir: %w", err)
	} else if !st.IsDir() {
		return nil, nil, fmt.Errorf("CNI config dir %s: not a directory", dir)
	}
	files, err := libcni.ConfFiles(dir, Extensions)
	if err != nil {
		return nil, nil, fmt.Errorf("reading CNI config dir: %w", err)
	}
	seen := map[string]string{}
	for _, f := range files {
		if filepath.Base(f) == ConfigFileName {
			continue
		}
		n, err := LoadFile(f)
		if err == nil && c != nil {
			err = Validate(ctx, c, n)
		}
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		if first, dup := seen[n.Name]; dup {
			skipped = append(skipped, fmt.Errorf("CNI config %s: network %q already defined by %s", f, n.Name, first))
			continue
		}
		seen[n.Name] = f
		nets = append(nets, n)
	}
	return nets, skipped, nil
}

// maxNetworkNameLen bounds a network name (it names files).
const maxNetworkNameLen = 253

// ValidNetworkName reports whether name follows the CNI spec's rule for
// network names (alphanumerics, '_', '.', '-'), starts with an alphanumeric,
// is not "." or ".." and fits a file name.
func ValidNetworkName(name string) bool {
	if name == "" || len(name) > maxNetworkNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// LoadFile parses a .conflist (a "plugins" array) or a single-plugin .conf.
func LoadFile(path string) (*Network, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	n, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	n.File = path
	return n, nil
}

// Parse decodes a network config list or a single plugin config.
func Parse(data []byte) (*Network, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	var list *libcni.NetworkConfigList
	if _, ok := probe["plugins"]; ok {
		l, err := libcni.NetworkConfFromBytes(data)
		if err != nil {
			return nil, err
		}
		list = l
	} else {
		conf, err := libcni.NetworkPluginConfFromBytes(data)
		if err != nil {
			return nil, err
		}
		if list, err = libcni.ConfListFromConf(conf); err != nil {
			return nil, err
		}
	}
	if list.Name == "" {
		return nil, fmt.Errorf("missing network name")
	}
	if !ValidNetworkName(list.Name) {
		// The name reaches plugins and names files (libcni's cache,
		// host-local's dataDir): never a path.
		return nil, fmt.Errorf("network name %q: only letters, digits, '_', '.' and '-' (starting with a letter or digit), at most %d characters",
			list.Name, maxNetworkNameLen)
	}
	if len(list.Plugins) == 0 {
		return nil, fmt.Errorf("network %q has no plugins", list.Name)
	}
	return &Network{Name: list.Name, List: list}, nil
}

// Validate asks libcni whether every plugin of n exists and supports the
// network's CNI version.
func Validate(ctx context.Context, c libcni.CNI, n *Network) error {
	if _, err := c.ValidateNetworkList(ctx, n.List); err != nil {
		where := n.File
		if where == "" {
			where = n.Name
		}
		return fmt.Errorf("CNI config %s (network %q): %w", filepath.Clean(where), n.Name, err)
	}
	return nil
}
