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
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	var kib int
	if i := strings.Index(string(data), "VmRSS:"); i >= 0 {
		_, _ = fmt.Sscanf(string(data[i:]), "VmRSS: %d", &kib)
	}
	return kib, nil
}
