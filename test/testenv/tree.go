package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// WriteTree creates under root, for each path: a symlink (value
// "->target"), a directory (path ending in "/") or a file with the value as
// its content (mode 0755: scripts run).
func WriteTree(t testing.TB, root string, tree map[string]string) {
	t.Helper()
	for p, v := range tree {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		switch target, link := strings.CutPrefix(v, "->"); {
		case link:
			require.NoError(t, os.Symlink(target, full))
		case strings.HasSuffix(p, "/"):
			require.NoError(t, os.MkdirAll(full, 0o755))
		default:
			require.NoError(t, os.WriteFile(full, []byte(v), 0o755))
		}
	}
}

// HostLikeRoot is a temp dir laid out as a host's / seen from outside it
// (as the DaemonSet sees the host's / at /host): Debian's /var/run -> /run,
// a kubelet dir on another disk, CNI plugin dirs reached through relative,
// absolute and escaping links, a loop, and a link to a file the root does
// not have (/etc/passwd). Absolute links must lead into the root, never to
// this machine's own files.
func HostLikeRoot(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	WriteTree(t, root, map[string]string{
		"run/netns/pod1":              "",
		"var/run":                     "->/run",
		"var/lib/kubelet":             "->/data/kubelet",
		"data/kubelet/pod-resources/": "",
		"usr/libexec/cni/bridge":      "#!/bin/sh\n",
		"opt/cni/bin":                 "->../../usr/libexec/cni",
		"opt/other/host-local":        "->/usr/libexec/cni/bridge",
		"opt/other/escape":            "->../../../../../../usr/libexec/cni/bridge",
		"opt/other/dir/":              "",
		"opt/other/loop1":             "->loop2",
		"opt/other/loop2":             "->loop1",
		"opt/other/to-nri-cni-passwd": "->/etc/passwd",
	})
	return root
}
