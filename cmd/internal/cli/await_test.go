package cli

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serveOnce answers every request on socket with reply, after delay.
func serveAwait(t *testing.T, socket, reply string, delay time.Duration) {
	t.Helper()
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			if !strings.HasPrefix(line, "await sb1 ") {
				reply = "error unexpected request " + line
			}
			time.Sleep(delay)
			_, _ = c.Write([]byte(reply + "\n"))
			c.Close()
		}
	}()
}

func TestAwaitHookCommand(t *testing.T) {
	dir, err := os.MkdirTemp("", "aw")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })

	ok := filepath.Join(dir, "ok.sock")
	serveAwait(t, ok, "ok", 0)
	code, _, errOut := runApp(t, nil, "await", "--socket", ok, "--sandbox", "sb1", "--timeout", "5s")
	assert.Equal(t, 0, code, errOut)

	failed := filepath.Join(dir, "failed.sock")
	serveAwait(t, failed, "error pod team/web (sandbox sb1): network \"alpha\": no leases", 0)
	code, _, errOut = runApp(t, nil, "await", "--socket", failed, "--sandbox", "sb1")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `await: pod sandbox sb1: pod team/web (sandbox sb1): network "alpha": no leases`)

	// nri-cni not there yet (restarting): asked again until it is.
	late := filepath.Join(dir, "late.sock")
	go func() { time.Sleep(600 * time.Millisecond); serveAwait(t, late, "ok", 0) }()
	code, _, errOut = runApp(t, nil, "await", "--socket", late, "--sandbox", "sb1", "--timeout", "10s")
	assert.Equal(t, 0, code, errOut)

	code, _, errOut = runApp(t, nil, "await", "--socket", filepath.Join(dir, "none.sock"), "--sandbox", "sb1", "--timeout", "500ms")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "nri-cni did not confirm its networks within 500ms")

	code, _, errOut = runApp(t, nil, "await", "--sandbox", "sb1")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "--socket and --sandbox are required")
}
