package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Snapshot records everything under roots: file contents by hash, other
// entries by type, a missing root as absent. Two equal snapshots mean
// nothing was created, changed or removed there.
func Snapshot(roots ...string) map[string]string {
	m := map[string]string{}
	for _, root := range roots {
		if _, err := os.Lstat(root); os.IsNotExist(err) {
			m[root] = "absent"
			continue
		}
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				m[p] = "error: " + err.Error()
			case d.Type().IsRegular():
				m[p] = FileSum(p)
			default:
				m[p] = d.Type().String()
			}
			return nil
		})
	}
	return m
}

// FileSum is the hex SHA-256 of a file ("" if unreadable).
func FileSum(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// TOMLTable returns the key lines of table name ("plugins.'x'") in
// containerd's `config dump` output, trimmed, one per line.
func TOMLTable(dump, name string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(dump, "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "[") {
			in = l == "["+name+"]"
			continue
		}
		if in && l != "" {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// KindBaseConfigs are minimal containerd configs shaped like a kind node's
// (version 2, CRI tables under io.containerd.grpc.v1.cri) and like a
// version 3 one, with root and state under dir. None has an NRI table, so
// kind's merge of a patch that only has one is a concatenation.
func KindBaseConfigs(dir string) map[string]string {
	head := fmt.Sprintf("root = %q\nstate = %q\n", filepath.Join(dir, "root"), filepath.Join(dir, "state"))
	return map[string]string{
		"v2": head + "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n",
		"v3": head + "version = 3\n[plugins.\"io.containerd.cri.v1.images\"]\n  snapshotter = \"overlayfs\"\n",
	}
}

// RewriteBridge points the ConfigMap network key's first plugin (a bridge
// with host-local ranges) at another bridge and subnet, leaving the rest of
// the chain as shipped. It returns the network's name.
func (b *Base) RewriteBridge(key, bridge, subnet string) (string, error) {
	var conf map[string]any
	if err := json.Unmarshal([]byte(b.ConfigMap.Data[key]), &conf); err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	plugins, _ := conf["plugins"].([]any)
	if len(plugins) == 0 {
		return "", fmt.Errorf("%s: no plugins", key)
	}
	br, _ := plugins[0].(map[string]any)
	if br == nil || br["type"] != "bridge" {
		return "", fmt.Errorf("%s: first plugin is not a bridge", key)
	}
	br["bridge"] = bridge
	ipam, _ := br["ipam"].(map[string]any)
	ranges, _ := ipam["ranges"].([]any)
	if len(ranges) != 1 {
		return "", fmt.Errorf("%s: want one host-local range set", key)
	}
	set, _ := ranges[0].([]any)
	if len(set) != 1 {
		return "", fmt.Errorf("%s: want one range", key)
	}
	rng, _ := set[0].(map[string]any)
	if rng == nil {
		return "", fmt.Errorf("%s: bad range", key)
	}
	rng["subnet"] = subnet
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return "", err
	}
	b.ConfigMap.Data[key] = string(data)
	name, _ := conf["name"].(string)
	return name, nil
}

// EditConfig rewrites the ConfigMap's nri.conf through edit (on its YAML
// decoded into a map; comments are not kept).
func (b *Base) EditConfig(edit func(conf map[string]any) error) error {
	var conf map[string]any
	if err := yaml.Unmarshal([]byte(b.ConfigMap.Data[ConfigKey]), &conf); err != nil {
		return fmt.Errorf("deploy/base %s: %w", ConfigKey, err)
	}
	if err := edit(conf); err != nil {
		return fmt.Errorf("deploy/base %s: %w", ConfigKey, err)
	}
	data, err := yaml.Marshal(conf)
	if err != nil {
		return fmt.Errorf("deploy/base %s: %w", ConfigKey, err)
	}
	b.ConfigMap.Data[ConfigKey] = string(data)
	return nil
}

// Changed lists the paths whose entry differs between two snapshots
// (added, removed or changed), sorted.
func Changed(before, after map[string]string) []string {
	var out []string
	for p, v := range before {
		if after[p] != v {
			out = append(out, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}
