package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// DeviceClassRule is kubernetes.dra.deviceClasses: the DeviceClasses
// through which a namespace's ResourceClaims may get nri-cni.io devices.
// A DeviceClass's opaque NetworkConfig wins over the claim's, so a class
// whose config pins values (a MAC, cni-args) binds tenants only if they
// cannot pick another class — the base class nri-cni.io selects every
// device with no config at all. Absent (nil): any class.
//
// The node refuses, when the kubelet prepares a claim, a request of a class
// its namespace may not use; deploy/base's dra-class-policy.yaml refuses the
// same at admission when its ConfigMap carries the same lists.
type DeviceClassRule struct {
	// Default: the classes of every namespace not listed in Namespaces.
	// Required ([] allows none).
	Default []string `json:"default"`
	// Namespaces: a listed namespace gets exactly its own list (nothing
	// inherited from Default), e.g. the network team's.
	Namespaces map[string][]string `json:"namespaces"`
}

// DeviceClassesKey is the key in nri.conf.
const DeviceClassesKey = "kubernetes.dra.deviceClasses"

// maxDeviceClassName is a DeviceClass name's limit (a DNS subdomain).
const maxDeviceClassName = 253

// ClassesFor returns the classes a claim of namespace may use and the key
// that says so; ruled is false without a rule (any class).
func (d *DRAConfig) ClassesFor(namespace string) (classes []string, key string, ruled bool) {
	if d == nil || d.DeviceClasses == nil {
		return nil, "", false
	}
	r := d.DeviceClasses
	if list, ok := r.Namespaces[namespace]; ok {
		return list, fmt.Sprintf("%s.namespaces.%s", DeviceClassesKey, namespace), true
	}
	return r.Default, DeviceClassesKey + ".default", true
}

// ClassAllowed reports whether a claim of namespace may use class; the error
// names the class, the namespace, the key and what it allows.
func (d *DRAConfig) ClassAllowed(namespace, class string) error {
	classes, key, ruled := d.ClassesFor(namespace)
	if !ruled || class != "" && slices.Contains(classes, class) {
		return nil
	}
	allowed := "none"
	if len(classes) > 0 {
		allowed = strings.Join(classes, ", ")
	}
	if class == "" {
		return fmt.Errorf("no DeviceClass found for the request, and namespace %s may use only some (%s: %s)", namespace, key, allowed)
	}
	return fmt.Errorf("DeviceClass %q is not one namespace %s may use (%s: %s)", class, namespace, key, allowed)
}

func (r *DeviceClassRule) validate() error {
	if r == nil {
		return nil
	}
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: %s%s: %s", ErrInvalid, DeviceClassesKey, key, fmt.Sprintf(format, args...))
	}
	if r.Default == nil {
		return bad(".default", "required: the DeviceClasses of every namespace not listed under namespaces ([] for none)")
	}
	if err := validClassList(DeviceClassesKey+".default", r.Default); err != nil {
		return err
	}
	names := make([]string, 0, len(r.Namespaces))
	for ns := range r.Namespaces {
		names = append(names, ns)
	}
	sort.Strings(names)
	for _, ns := range names {
		if !validNamespace(ns) {
			return bad(".namespaces", "%q is not a namespace name", ns)
		}
		if r.Namespaces[ns] == nil {
			return bad(".namespaces."+ns, "a list of DeviceClasses ([] for none)")
		}
		if err := validClassList(DeviceClassesKey+".namespaces."+ns, r.Namespaces[ns]); err != nil {
			return err
		}
	}
	return nil
}

// validClassList: DeviceClass names (DNS subdomains), each once; key names
// the list in errors.
func validClassList(key string, list []string) error {
	seen := map[string]bool{}
	for i, c := range list {
		if !validSubdomain(c) {
			return fmt.Errorf("%w: %s[%d]: %q is not a DeviceClass name (a DNS subdomain: lower case letters, digits, '-', '.')",
				ErrInvalid, key, i, c)
		}
		if seen[c] {
			return fmt.Errorf("%w: %s[%d]: %q listed twice", ErrInvalid, key, i, c)
		}
		seen[c] = true
	}
	return nil
}

// validSubdomain: a DNS-1123 subdomain (what object names like a
// DeviceClass's are): dot-separated labels, at most 253 characters.
func validSubdomain(s string) bool {
	if len(s) == 0 || len(s) > maxDeviceClassName {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if !validNamespace(label) {
			return false
		}
	}
	return true
}
