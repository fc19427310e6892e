package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// KubeletPaths are where a cluster's kubelet serves its node-local gRPC APIs.
type KubeletPaths struct {
	// DevicePluginDir holds the device manager's Registration socket
	// (DevicePluginSocket) and the device plugins' own sockets. It is fixed,
	// /var/lib/kubelet/device-plugins, whatever --root-dir says (the device
	// manager uses k8s.io/kubelet's v1beta1.KubeletSocket), so every cluster
	// on the host shares it, and a starting kubelet removes every socket in
	// it: run device plugin tests against one cluster at a time.
	DevicePluginDir    string
	DevicePluginSocket string
	// PodResourcesSocket is the PodResources API (<root-dir>/pod-resources/kubelet.sock).
	PodResourcesSocket string
	// PluginsRegistryDir is where kubelet plugins (DRA drivers) register
	// (<root-dir>/plugins_registry).
	PluginsRegistryDir string
}

// KubeletPaths returns the paths of c's kubelet.
func (c *Cluster) KubeletPaths() KubeletPaths {
	return KubeletPaths{
		DevicePluginDir:    filepath.Clean(pluginapi.DevicePluginPath),
		DevicePluginSocket: pluginapi.KubeletSocket,
		PodResourcesSocket: filepath.Join(c.KubeletRootDir, "pod-resources", "kubelet.sock"),
		PluginsRegistryDir: filepath.Join(c.KubeletRootDir, "plugins_registry"),
	}
}

// Check says which of the sockets does not exist (the kubelet creates them
// at start, before the node is Ready).
func (p KubeletPaths) Check() error {
	var errs []error
	for _, s := range []string{p.DevicePluginSocket, p.PodResourcesSocket} {
		st, err := os.Stat(s)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("kubelet socket: %w", err))
		case st.Mode()&os.ModeSocket == 0:
			errs = append(errs, fmt.Errorf("kubelet socket %s is not a socket (%v)", s, st.Mode()))
		}
	}
	return errors.Join(errs...)
}
