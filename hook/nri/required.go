package nri

// Whether a pod that gets nri-cni's networks requires nri-cni: the node's
// NRI default validator refuses the pod's containers while nri-cni is away
// only if the pod names it as a required plugin (the annotation the
// required-plugins MutatingAdmissionPolicy of deploy/base adds). A pod that
// gets networks without it is not protected: nri-cni warns once per pod
// and counts it, so an admin sees that the policy is missing or bypassed.

import (
	"strings"

	nriapi "github.com/containerd/nri/pkg/plugin"
	"sigs.k8s.io/yaml"
)

// RequiredAnnotation is the annotation the validator reads (the pod-wide
// key; "/container.<name>" scopes it to one container, the bare key is the
// fallback).
const RequiredAnnotation = nriapi.RequiredPluginsAnnotation + "/pod"

// maxRequiredValue bounds the annotation value parsed (tenant input).
const maxRequiredValue = 4096

// requires reports whether pod annotations make the validator require the
// plugin name (or idx-name) for every container without a key of its own.
func requires(annotations map[string]string, name, idx string) bool {
	value := ""
	for _, key := range []string{RequiredAnnotation, nriapi.RequiredPluginsAnnotation} {
		if v, ok := annotations[key]; ok {
			value = v
			break
		}
	}
	if value == "" || len(value) > maxRequiredValue {
		return false
	}
	var list []string
	if err := yaml.Unmarshal([]byte(value), &list); err != nil {
		return false
	}
	for _, p := range list {
		p = strings.TrimSpace(p)
		if p == name || idx != "" && p == idx+"-"+name {
			return true
		}
	}
	return false
}
