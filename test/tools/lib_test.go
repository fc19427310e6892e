// Package tools holds the installers of the pinned test components (shell);
// this test checks what their shared library, lib.sh, shows while a
// component builds: the go tool's output goes to a log, the terminal gets one
// line per component.
package tools

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// component runs lib.sh's component with a build command that prints what
// `go install -v` prints and takes build seconds, progress every second.
// tty runs it on a terminal (script(1) gives it one). It returns what was
// shown, the build's log and the exit error.
func component(t *testing.T, tty bool, build string) (shown, logged string, err error) {
	t.Helper()
	cache := t.TempDir()
	script := `log() { echo "test: $*" >&2; }
set -euo pipefail
source lib.sh
component "$NRI_CNI_TOOLS/thing-v1/.stamp" thing-v1 "Thing v1" "~2s" bash -c "$BUILD"`
	var cmd *exec.Cmd
	if tty {
		if _, lerr := exec.LookPath("script"); lerr != nil {
			t.Skip("script(1) (util-linux) not installed: no terminal to test on")
		}
		f := filepath.Join(t.TempDir(), "run.sh")
		require.NoError(t, os.WriteFile(f, []byte(script), 0o755))
		cmd = exec.Command("script", "-qec", "bash "+f, "/dev/null")
	} else {
		cmd = exec.Command("bash", "-c", script)
	}
	cmd.Env = append(os.Environ(), "NRI_CNI_TOOLS="+cache, "PROGRESS_EVERY=1", "BUILD="+build, "TERM=xterm")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	data, _ := os.ReadFile(filepath.Join(cache, ".logs", "thing-v1.log"))
	return out.String(), string(data), err
}

const slowBuild = `echo "go: downloading example.com/dep v1.0.0"; echo "example.com/dep/pkg"; sleep 2.5`

// Off a terminal (CI logs): a start line, a progress line a PROGRESS_EVERY
// naming what is being compiled, and a done line; never the go tool's own
// output, which is in the log.
func TestComponentLinesOffATerminal(t *testing.T) {
	shown, logged, err := component(t, false, slowBuild)
	require.NoError(t, err, shown)
	t.Logf("shown:\n%s", shown)
	lines := strings.Split(strings.TrimSpace(shown), "\n")
	require.GreaterOrEqual(t, len(lines), 3)
	assert.Equal(t, "test: Thing v1 … building (cold, ~2s)", lines[0])
	assert.Regexp(t, `^test: still building Thing v1… 1s \(example.com/dep/pkg\)$`, lines[1])
	assert.Regexp(t, `^test: Thing v1 done in \d+s$`, lines[len(lines)-1])
	assert.NotContains(t, shown, "go: downloading")
	assert.Contains(t, logged, "go: downloading example.com/dep v1.0.0")
}

// On a terminal: the component's lines replace each other, one line in all,
// which ends as its done line.
func TestComponentIsOneLineOnATerminal(t *testing.T) {
	shown, _, err := component(t, true, slowBuild)
	require.NoError(t, err, shown)
	t.Logf("shown: %q", shown)
	assert.NotContains(t, shown, "go: downloading")
	assert.Contains(t, shown, "still building Thing v1", "the progress was shown")
	// What the terminal ends up displaying: each "\r\x1b[K" erases the
	// line written so far.
	var screen []string
	for _, l := range strings.Split(strings.ReplaceAll(shown, "\r\n", "\n"), "\n") {
		if i := strings.LastIndex(l, "\r\x1b[K"); i >= 0 {
			l = l[i+len("\r\x1b[K"):]
		}
		if l != "" {
			screen = append(screen, l)
		}
	}
	require.Len(t, screen, 1, "one line for the component: %q", screen)
	assert.Regexp(t, regexp.MustCompile(`^test: Thing v1 done in \d+s$`), screen[0])
}

// A failed build says so on a line of its own, with the end of its log, and
// the installer fails.
func TestComponentFailureShowsTheLog(t *testing.T) {
	for _, tty := range []bool{false, true} {
		shown, _, err := component(t, tty, `echo "compile: undefined: frob"; exit 3`)
		require.Error(t, err, "tty %v: %s", tty, shown)
		assert.Regexp(t, `test: Thing v1 FAILED after \d+s; the end of .*thing-v1.log:`, shown, "tty %v", tty)
		assert.Contains(t, shown, "    compile: undefined: frob", "tty %v", tty)
	}
}
