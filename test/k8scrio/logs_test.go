package k8scrio

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Readers of nri-cni's log (logrus text, through kubectl logs) and the
// kubelet's (klog text, its file).

// logLines are nri-cni's log lines with msg="<msg>" about the sandbox.
func logLines(log, msg, sandbox string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="`+msg+`"`) && strings.Contains(l, "sandbox="+sandbox) {
			out = append(out, l)
		}
	}
	return out
}

// logField is the value of key in a logrus text line (unquoted; "" when
// absent or empty).
func logField(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	rest := line[i+len(key)+2:]
	if strings.HasPrefix(rest, `"`) {
		if v, err := strconv.QuotedPrefix(rest); err == nil {
			s, _ := strconv.Unquote(v)
			return s
		}
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}

// klogEntries are the entries of a klog text log (an entry may span lines:
// err=<...>) holding every one of parts.
func klogEntries(log string, parts ...string) []string {
	var entries []string
	for _, l := range strings.Split(log, "\n") {
		if len(l) > 5 && strings.ContainsRune("IWEF", rune(l[0])) && l[1] >= '0' && l[1] <= '9' || len(entries) == 0 {
			entries = append(entries, l)
			continue
		}
		entries[len(entries)-1] += "\n" + l
	}
	var out []string
	for _, e := range entries {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(e, p)
		}
		if all {
			out = append(out, e)
		}
	}
	return out
}

func TestLogField(t *testing.T) {
	l := `time="x" level=info msg="network detached" ifname=net1 netns= network=a sandbox=b`
	assert.Equal(t, "", logField(l, "netns"))
	assert.Equal(t, "net1", logField(l, "ifname"))
	assert.Equal(t, "network detached", logField(l, "msg"))
	assert.Equal(t, "/var/run/netns/x y", logField(`a=1 netns="/var/run/netns/x y" b=2`, "netns"))
	assert.Equal(t, "", logField(l, "nope"))
}

func TestKlogEntries(t *testing.T) {
	log := "I1125 18:00:00.1 1 a.go:1] \"fine\"\n" +
		"E1125 18:00:01.1 1 remote_runtime.go:355] \"StopPodSandbox from runtime service failed\" err=<\n" +
		"\trpc error: boom\n" +
		" > podSandboxID=\"abc\"\n" +
		"I1125 18:00:02.1 1 a.go:2] \"podSandboxID=def\"\n"
	got := klogEntries(log, "StopPodSandbox from runtime service failed", "abc")
	assert.Len(t, got, 1)
	assert.Contains(t, got[0], "rpc error: boom")
	assert.Empty(t, klogEntries(log, "StopPodSandbox from runtime service failed", "def"))
}
