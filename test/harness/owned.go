package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Helpers that look at what belongs to given sandboxes only, so a test's
// assertions cannot be disturbed by another test's pods.

// IPFilesOf lists host-local's allocation files held by the given
// containers (host-local writes the container id as a file's first line).
func (s Secondary) IPFilesOf(ids ...string) []string {
	want := set(ids)
	var out []string
	for _, name := range s.IPFiles() {
		data, err := os.ReadFile(filepath.Join(s.IPAMDir, s.Name, name))
		if err != nil {
			continue
		}
		owner, _, _ := strings.Cut(string(data), "\n")
		if want[strings.TrimSpace(owner)] {
			out = append(out, name)
		}
	}
	return out
}

// HasIP reports whether host-local still holds ip in the network.
func (s Secondary) HasIP(ip string) bool {
	_, err := os.Stat(filepath.Join(s.IPAMDir, s.Name, ip))
	return err == nil
}

// StateFilesOf lists nri-cni's records of the given sandboxes.
func (p PluginConfig) StateFilesOf(ids ...string) []string {
	var out []string
	for _, f := range p.StateFiles() {
		if set(ids)[strings.TrimSuffix(filepath.Base(f), ".json")] {
			out = append(out, f)
		}
	}
	return out
}

// CacheFilesOf lists libcni's cached results of the given containers
// (named <network>-<container id>-<ifname>).
func (p PluginConfig) CacheFilesOf(ids ...string) []string {
	var out []string
	for _, f := range p.CacheFiles() {
		for _, id := range ids {
			if id != "" && strings.Contains(filepath.Base(f), "-"+id+"-") {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

// RemovePods stops and removes every pod that carries all labels in
// selector, listing them through CRI (so pods whose RunPodSandbox failed,
// whose ids a test never got, are found too). It returns the pods it saw.
func (c *CRI) RemovePods(ctx context.Context, selector map[string]string) ([]string, error) {
	pods, err := c.ListPods(ctx, selector)
	if err != nil {
		return nil, err
	}
	var names []string
	var errs []error
	for _, p := range pods {
		names = append(names, describePod(p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), p.GetId(), p.GetState().String()))
		if err := c.StopPod(ctx, p.GetId()); err != nil {
			errs = append(errs, err)
		}
		if err := c.RemovePod(ctx, p.GetId()); err != nil {
			errs = append(errs, err)
		}
	}
	return names, errors.Join(errs...)
}

func describePod(ns, name, id, state string) string {
	return fmt.Sprintf("%s/%s (sandbox %.12s, %s)", ns, name, id, state)
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id != "" {
			m[id] = true
		}
	}
	return m
}
