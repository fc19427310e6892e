package cni

import (
	"context"
	"encoding/json"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

// checkExec runs CHECK with the host side's shared state left out of the
// prevResult the plugins compare against: the MAC of every interface that is
// not in a sandbox (the node's bridge, a host veth). A Linux bridge's MAC
// follows its ports, so it changes whenever another pod on that bridge comes
// or goes; the reference bridge plugin's CHECK compares it with the one cached
// at ADD and would fail every other pod on the bridge ("Bridge interface …
// Mac doesn't match") — a change that is not this attachment's drift. (The
// plugin skips the comparison when the cached MAC is empty.) Everything in
// the pod is checked as cached. Other commands pass through unchanged.
type checkExec struct{ invoke.Exec }

func newCheckExec(base invoke.Exec) invoke.Exec {
	if base == nil {
		base = &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	}
	return checkExec{base}
}

func (e checkExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	if isCheck(environ) {
		stdin = withoutHostMACs(stdin)
	}
	return e.Exec.ExecPlugin(ctx, path, stdin, environ)
}

func isCheck(environ []string) bool {
	for _, kv := range environ {
		if strings.HasPrefix(kv, "CNI_COMMAND=") {
			return kv == "CNI_COMMAND=CHECK"
		}
	}
	return false
}

// withoutHostMACs blanks the mac of prevResult's interfaces that have no
// sandbox; stdin is returned as it is when it has none or does not parse.
func withoutHostMACs(stdin []byte) []byte {
	var conf map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &conf); err != nil || conf["prevResult"] == nil {
		return stdin
	}
	var prev map[string]json.RawMessage
	if err := json.Unmarshal(conf["prevResult"], &prev); err != nil || prev["interfaces"] == nil {
		return stdin
	}
	var itfs []map[string]any
	if err := json.Unmarshal(prev["interfaces"], &itfs); err != nil {
		return stdin
	}
	changed := false
	for _, itf := range itfs {
		if sb, _ := itf["sandbox"].(string); sb == "" && itf["mac"] != nil {
			delete(itf, "mac")
			changed = true
		}
	}
	if !changed {
		return stdin
	}
	var err error
	if prev["interfaces"], err = json.Marshal(itfs); err != nil {
		return stdin
	}
	if conf["prevResult"], err = json.Marshal(prev); err != nil {
		return stdin
	}
	out, err := json.Marshal(conf)
	if err != nil {
		return stdin
	}
	return out
}
