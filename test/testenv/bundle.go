package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// BusyboxApplets are linked into the test rootfs.
var BusyboxApplets = []string{"sh", "ip", "cat", "sleep", "echo", "grep"}

// BusyboxBundle makes an OCI bundle in dir: a rootfs with Debian's static
// busybox (/bin/busybox, from busybox-static) and a config.json from
// `runc spec`, running args with the given hooks. edit may adjust the spec.
func BusyboxBundle(t testing.TB, runc, dir string, args []string, hooks *specs.Hooks, edit func(*specs.Spec)) string {
	t.Helper()
	bin := filepath.Join(dir, "rootfs", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is needed (apt-get install busybox-static): %v", err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range BusyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(bin, a)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Process.Terminal = false
	spec.Process.Args = args
	spec.Process.Env = []string{"PATH=/bin"}
	spec.Hooks = hooks
	if edit != nil {
		edit(&spec)
	}
	raw, err = json.MarshalIndent(&spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// NRICNIHooks returns the createRuntime + poststop hooks that run
// `bin hook --config cfg STAGE`, as a hooks.d entry would.
func NRICNIHooks(bin, cfg string) *specs.Hooks {
	h := func(stage string) specs.Hook {
		return specs.Hook{Path: bin, Args: []string{"nri-cni", "hook", "--config", cfg, stage},
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	}
	return &specs.Hooks{CreateRuntime: []specs.Hook{h("createRuntime")}, Poststop: []specs.Hook{h("poststop")}}
}
