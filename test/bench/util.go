package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
)

func goVersion() string { return runtime.Version() }
func numCPU() int       { return runtime.NumCPU() }
func trim(b []byte) []byte {
	return bytes.TrimSpace(b)
}

func firstField(text, key string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, key) {
			if _, v, ok := strings.Cut(line, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return ""
}

// rssKiB reads a process's resident set size.
func rssKiB(pid int) (int, error) {
	r, err := readRSS(pid)
	return r.total, err
}

// rss is a process's resident set: in all, and its parts — anonymous
// memory (heap, stacks) and file pages (mostly its own binary's).
type rss struct{ total, anon, file int } // KiB

func readRSS(pid int) (rss, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return rss{}, err
	}
	var r rss
	for _, f := range []struct {
		key string
		to  *int
	}{{"VmRSS:", &r.total}, {"RssAnon:", &r.anon}, {"RssFile:", &r.file}} {
		if i := strings.Index(string(data), f.key); i >= 0 {
			_, _ = fmt.Sscanf(string(data[i+len(f.key):]), "%d", f.to)
		}
	}
	return r, nil
}
