// Package nodeconf checks a node's runtime configuration for what nri-cni's
// fail-closed mode needs: NRI on and NRI's default validator enabled, so that
// a pod annotated required-plugins.noderesource.dev/pod: '["nri-cni"]' gets no
// container while nri-cni is not connected. It reads the runtime's config
// files the way the runtime does (containerd: the main config and its
// `imports`; CRI-O: crio.conf and crio.conf.d) under a root directory, and
// judges the runtime's version as reported over NRI.
//
// Pure functions and file reads only: no logging, no writes (`nri-cni
// node-setup` writes), nothing that blocks.
package nodeconf

import (
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/hostroot"
)

// Runtime names, as the runtimes report themselves over NRI.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
)

// Host paths the runtimes read by default.
const (
	ContainerdConfig     = "/etc/containerd/config.toml"
	ContainerdDropInDir  = "/etc/containerd/conf.d"
	ContainerdImportGlob = ContainerdDropInDir + "/*.toml"
	// ContainerdDropIn is where nri-cni's containerd drop-in is installed.
	ContainerdDropIn = ContainerdDropInDir + "/" + node.ContainerdDropInName
	CRIOConfig       = "/etc/crio/crio.conf"
	CRIODropInDir    = "/etc/crio/crio.conf.d"
	// CRIODropIn is where nri-cni's CRI-O drop-in is installed.
	CRIODropIn = CRIODropInDir + "/" + node.CRIODropInName
)

// Options says what to check.
type Options struct {
	// Runtime is the runtime's name as NRI reports it ("containerd",
	// "cri-o"; "crio" is accepted too).
	Runtime string
	// RuntimeVersion is the runtime's version as NRI reports it ("v2.4.2",
	// "2.1.0", "1.36.3"); "" = unknown, not judged.
	RuntimeVersion string
	// Root is where the host's / is ("" = "/"), e.g. "/host" in a container.
	Root string
	// FS, if set, is the host's / (tests); it replaces Root.
	FS fs.FS
	// ContainerdConfig is containerd's main config, a host path (default
	// /etc/containerd/config.toml).
	ContainerdConfig string
	// CRIOConfig and CRIODropInDir are CRI-O's, host paths (defaults
	// /etc/crio/crio.conf and /etc/crio/crio.conf.d).
	CRIOConfig    string
	CRIODropInDir string
}

// Report is what Check found.
type Report struct {
	Runtime        string // normalised: RuntimeContainerd, RuntimeCRIO or as given
	RuntimeVersion string
	// Files are the config files the runtime reads, in its order (host paths).
	Files            []string
	NRIEnabled       bool
	ValidatorEnabled bool
	// Findings are what stands between this node and fail-closed pods;
	// none when it is set up.
	Findings []Finding
}

// Finding is one thing missing, with the files it is about and its fix.
type Finding struct {
	Files   []string
	Problem string
	Fix     string
}

// OK reports whether nothing is missing.
func (r Report) OK() bool { return len(r.Findings) == 0 }

// String renders the report for a person: one line when all is well, else
// one entry per finding with its files and its fix.
func (r Report) String() string {
	name := r.Runtime
	if r.RuntimeVersion != "" {
		name += " " + r.RuntimeVersion
	}
	var b strings.Builder
	if r.OK() {
		fmt.Fprintf(&b, "%s: NRI on, default validator on: pods requiring nri-cni wait for it once the runtime runs with these files (read: %s)\n",
			name, strings.Join(r.Files, ", "))
		return b.String()
	}
	fmt.Fprintf(&b, "%s: not set up to hold back pods that require nri-cni while it is away:\n", name)
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "  - %s\n", f.Problem)
		if len(f.Files) > 0 {
			fmt.Fprintf(&b, "    checked: %s\n", strings.Join(f.Files, ", "))
		}
		fmt.Fprintf(&b, "    fix: %s\n", f.Fix)
	}
	return b.String()
}

// NormalizeRuntime maps a runtime's name to RuntimeContainerd or RuntimeCRIO
// ("crio" and "CRI-O" are CRI-O); other names are returned lower-cased.
func NormalizeRuntime(name string) string {
	switch n := strings.ToLower(strings.TrimSpace(name)); n {
	case "crio", RuntimeCRIO:
		return RuntimeCRIO
	default:
		return n
	}
}

// Check reads the runtime's configuration under o.Root (or o.FS) and
// reports what keeps pods that require nri-cni from waiting for it.
func Check(o Options) Report {
	r := Report{Runtime: NormalizeRuntime(o.Runtime), RuntimeVersion: o.RuntimeVersion}
	fsys := o.FS
	if fsys == nil {
		// Each name resolved inside Root: a config file or drop-in dir
		// that is an absolute symlink on the host is read where the
		// runtime reads it.
		fsys = hostroot.FS(o.Root)
	}
	switch r.Runtime {
	case RuntimeContainerd:
		checkContainerd(fsys, o, &r)
	case RuntimeCRIO:
		checkCRIO(fsys, o, &r)
	default:
		r.Findings = append(r.Findings, Finding{
			Problem: fmt.Sprintf("runtime %q: nri-cni cannot tell whether it holds back pods that require nri-cni "+
				"(it knows containerd 2.2+ and CRI-O 1.34+, whose NRI has the default validator)", o.Runtime),
			Fix: "run nri-cni on containerd or CRI-O, or check that runtime's NRI default validator yourself",
		})
		return r
	}
	r.Findings = append(r.Findings, CheckVersion(r.Runtime, r.RuntimeVersion)...)
	return r
}

// fixCommand is the one-line fix for a runtime: node-setup (with the
// options checked), then a restart.
func fixCommand(runtime string, o Options) string {
	flags := ""
	if o.Root != "" && o.Root != "/" {
		flags = " --root " + o.Root
	}
	if runtime == RuntimeContainerd && o.ContainerdConfig != "" && path.Clean(o.ContainerdConfig) != ContainerdConfig {
		flags += " --config " + o.ContainerdConfig
	}
	if runtime == RuntimeCRIO {
		return "run `nri-cni node-setup --runtime crio" + flags + "`, then restart CRI-O (systemctl restart crio)"
	}
	return "run `nri-cni node-setup --runtime containerd" + flags + "`, then restart containerd (systemctl restart containerd)"
}

// rel turns a host path into a path in fsys (fs.FS paths have no leading /).
func rel(hostPath string) string {
	p := strings.TrimPrefix(path.Clean(filepath.ToSlash(hostPath)), "/")
	if p == "" {
		return "."
	}
	return p
}

// lookup walks doc along keys and returns the value there, if any.
func lookup(doc map[string]any, keys ...string) (any, bool) {
	var cur any = doc
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// setting is a boolean key's effective value and the file that set it last
// ("" = the runtime's default).
type setting struct {
	value bool
	file  string
}

// apply sets s from doc's key, if present; a value that is not a boolean is
// an error naming the file and the key.
func (s *setting) apply(doc map[string]any, file string, keys ...string) error {
	v, ok := lookup(doc, keys...)
	if !ok {
		return nil
	}
	b, ok := v.(bool)
	if !ok {
		return fmt.Errorf("%s: %s = %s is not true or false", file, tomlKey(keys), tomlValue(v))
	}
	s.value, s.file = b, file
	return nil
}

// tomlKey writes a dotted key as TOML does, quoting parts that need it.
func tomlKey(keys []string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k
		if strings.ContainsAny(k, ". \"'") {
			parts[i] = strconv.Quote(k)
		}
	}
	return strings.Join(parts, ".")
}

// tomlValue writes a decoded value for a message (strings quoted).
func tomlValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}
