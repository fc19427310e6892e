package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// kubectlFunc runs kubectl (the cluster's) and returns its output.
type kubectlFunc func(ctx context.Context, args ...string) (string, error)

// rendered is the part of `kubectl kustomize deploy/base` the overlay
// patches: the DaemonSet and the ConfigMap (whatever else the base holds is
// applied as shipped).
type rendered struct {
	ds appsv1.DaemonSet
	cm corev1.ConfigMap
}

// renderBase renders the base the way `kubectl apply -k` will and picks out
// the DaemonSet and the ConfigMap.
func renderBase(ctx context.Context, kubectl kubectlFunc, dir string) (rendered, error) {
	var r rendered
	out, err := kubectl(ctx, "kustomize", dir)
	if err != nil {
		return r, err
	}
	var haveDS, haveCM bool
	for _, doc := range bytes.Split([]byte(out), []byte("\n---\n")) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return r, fmt.Errorf("kubectl kustomize %s: %w", dir, err)
		}
		switch meta.Kind {
		case "DaemonSet":
			err, haveDS = yaml.Unmarshal(doc, &r.ds), true
		case "ConfigMap":
			err, haveCM = yaml.Unmarshal(doc, &r.cm), true
		}
		if err != nil {
			return r, fmt.Errorf("kubectl kustomize %s: %s: %w", dir, meta.Kind, err)
		}
	}
	if !haveDS || !haveCM {
		return r, fmt.Errorf("kubectl kustomize %s: want a DaemonSet and a ConfigMap (have DaemonSet %t, ConfigMap %t)", dir, haveDS, haveCM)
	}
	return r, nil
}

// conflist is a rewritten network config.
type conflist struct{ name, text string }

// rewriteBridge points the network's first plugin (a bridge with one
// host-local range) at another bridge and subnet; the rest of the chain
// stays as shipped.
func rewriteBridge(text, bridge, subnet string) (conflist, error) {
	var conf map[string]any
	if err := json.Unmarshal([]byte(text), &conf); err != nil {
		return conflist{}, err
	}
	plugins, _ := conf["plugins"].([]any)
	if len(plugins) == 0 {
		return conflist{}, fmt.Errorf("no plugins")
	}
	br, _ := plugins[0].(map[string]any)
	if br == nil || br["type"] != "bridge" {
		return conflist{}, fmt.Errorf("the first plugin is not a bridge")
	}
	br["bridge"] = bridge
	ipam, _ := br["ipam"].(map[string]any)
	ranges, _ := ipam["ranges"].([]any)
	if len(ranges) != 1 {
		return conflist{}, fmt.Errorf("want one host-local range set")
	}
	set, _ := ranges[0].([]any)
	rng, _ := firstOf(set).(map[string]any)
	if len(set) != 1 || rng == nil {
		return conflist{}, fmt.Errorf("want one host-local range")
	}
	rng["subnet"] = subnet
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return conflist{}, err
	}
	name, _ := conf["name"].(string)
	return conflist{name: name, text: string(data)}, nil
}

func firstOf(s []any) any {
	if len(s) == 0 {
		return nil
	}
	return s[0]
}
