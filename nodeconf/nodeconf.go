// Package nodeconf checks a node's runtime configuration for what nri-cni's
// fail-closed mode needs: NRI on and NRI's default validator enabled, so that
// a pod annotated required-plugins.noderesource.dev/pod: '["nri-cni"]' gets no
// container while nri-cni is not connected. It reads the runtime's config
// files the way the runtime does (containerd: the main config and its
// `imports`; CRI-O: crio.conf and crio.conf.d) under a root directory, and
// judges the runtime's version as reported over NRI, and whether the
// running runtime loaded those files (running.go). Every host path is
// resolved inside the root (root.go).
//
// Functions and file reads only: no logging, no writes (`nri-cni
// node-setup` writes), nothing that blocks but RuntimeAt's one bounded
// dial of the runtime's socket.
package nodeconf

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/nri-cni/nri-cni/deploy/node"
)

// Runtime names, as the runtimes report themselves over NRI.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
)

// Host paths the runtimes read by default.
const (
	ContainerdConfig    = "/etc/containerd/config.toml"
	ContainerdDropInDir = "/etc/containerd/conf.d"
	// ContainerdDropIn is where nri-cni's containerd drop-in is installed.
	ContainerdDropIn = ContainerdDropInDir + "/" + node.ContainerdDropInName
	// ContainerdSocket is containerd's API socket ([grpc] address).
	ContainerdSocket = "/run/containerd/containerd.sock"
	CRIOConfig       = "/etc/crio/crio.conf"
	CRIODropInDir    = "/etc/crio/crio.conf.d"
	// CRIODropIn is where nri-cni's CRI-O drop-in is installed.
	CRIODropIn = CRIODropInDir + "/" + node.CRIODropInName
	// CRIOSocket is CRI-O's API socket ([crio.api] listen).
	CRIOSocket = "/var/run/crio/crio.sock"
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
	// Socket is the runtime's API socket as its config names it (a host
	// path; "" when the config could not be read): where the running
	// runtime is found (RuntimePid).
	Socket string `json:"socket,omitempty"`
	// Dirs are the directories whose listing the runtime reads (globbed
	// imports, CRI-O's drop-in dir): a file added to or removed from one
	// after the runtime started is not in effect either.
	Dirs []string `json:"dirs,omitempty"`
	// Running is the running runtime as Judge found it (nil: not judged).
	Running *Running `json:"running,omitempty"`
	// Changed are the Files and Dirs changed after the running runtime
	// started: it runs without these changes until it is restarted.
	Changed []string `json:"changed,omitempty"`
}

// Finding is one thing missing, with the files it is about and its fix.
type Finding struct {
	Files   []string
	Problem string
	Fix     string
}

// OK reports whether nothing is missing.
func (r Report) OK() bool { return len(r.Findings) == 0 }

// String renders the report for a person: what the files set, then the
// state (State) with its reason, and for each finding its files and fix.
func (r Report) String() string {
	name := r.Runtime
	if r.RuntimeVersion != "" {
		name += " " + r.RuntimeVersion
	}
	var b strings.Builder
	if !r.OK() {
		fmt.Fprintf(&b, "%s: not set up to hold back pods that require nri-cni while it is away:\n", name)
		for _, f := range r.Findings {
			fmt.Fprintf(&b, "  - %s\n", f.Problem)
			if len(f.Files) > 0 {
				fmt.Fprintf(&b, "    checked: %s\n", strings.Join(f.Files, ", "))
			}
			fmt.Fprintf(&b, "    fix: %s\n", f.Fix)
		}
		fmt.Fprintf(&b, "  state: %s\n", StateFailOpen)
		return b.String()
	}
	files := strings.Join(r.Files, ", ")
	rt := r.Running
	switch r.State() {
	case StateFailClosed:
		if rt.NotRunning {
			fmt.Fprintf(&b, "%s: NRI on, default validator on (read: %s)\n  state: %s: nothing serves %s: "+
				"the runtime loads these files when it starts\n", name, files, StateFailClosed, r.Socket)
			break
		}
		fmt.Fprintf(&b, "%s: NRI on, default validator on (read: %s)\n  state: %s: the running %s (pid %d, started %s) "+
			"loaded these files: pods requiring nri-cni wait for it\n", name, files, StateFailClosed, r.Runtime, rt.Pid,
			rt.Started.Format(time.RFC3339))
	case StateRestartPending:
		fmt.Fprintf(&b, "%s: NRI on, default validator on (read: %s)\n  state: %s: changed after the running %s (pid %d) "+
			"started at %s: %s; it runs without these changes until it is restarted\n    fix: restart %s\n",
			name, files, StateRestartPending, r.Runtime, rt.Pid, rt.Started.Format(time.RFC3339),
			strings.Join(r.Changed, ", "), RestartCommand(r.Runtime))
	default:
		if rt == nil {
			fmt.Fprintf(&b, "%s: NRI on, default validator on: pods requiring nri-cni wait for it once the runtime runs "+
				"with these files (read: %s)\n  state: %s: the running runtime was not checked\n", name, files, StateUnverified)
			break
		}
		fmt.Fprintf(&b, "%s: NRI on, default validator on (read: %s)\n  state: %s: whether the running %s loaded these "+
			"files is not known: %s\n    fix: if they changed since it started, restart %s\n",
			name, files, StateUnverified, r.Runtime, rt.Unknown, RestartCommand(r.Runtime))
	}
	return b.String()
}

// RestartCommand names the runtime and how to restart it.
func RestartCommand(runtime string) string {
	if NormalizeRuntime(runtime) == RuntimeCRIO {
		return "CRI-O (systemctl restart crio)"
	}
	return "containerd (systemctl restart containerd)"
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
	fsys := fsOf(o)
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

// text is a string key's effective value ("" = unset).
func text(docs []map[string]any, keys ...string) string {
	out := ""
	for _, doc := range docs {
		if v, ok := lookup(doc, keys...); ok {
			if s, ok := v.(string); ok {
				out = s
			}
		}
	}
	return out
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
