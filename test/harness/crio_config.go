package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// writeFiles lays out CRI-O's private dir: crio.conf (and a drop-in dir
// holding only CRIOOpts.DropIns, so the host's /etc/crio/crio.conf.d is not
// read), storage.conf, registries.conf, the signature policy, the primary
// network and the runc wrapper.
func (c *CRIO) writeFiles(o CRIOOpts) error {
	for _, d := range []string{
		filepath.Dir(c.NRISocket), c.NRIPluginDir, c.NRIConfDir, c.NamespacesDir, c.PrimaryIPAMDir,
		c.path("net.d"), c.path("crio.conf.d"), c.HooksDir, c.path("cdi"), c.path("policies"),
		c.path("auth"), c.path("keys"), c.path("podman-tmp"), c.path("tmp"),
	} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	primary, _ := json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0", "name": c.PrimaryNetwork,
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": c.PrimaryBridge, "isGateway": true, "ipMasq": false,
				"ipam": map[string]any{"type": "host-local", "subnet": c.PrimarySubnet, "dataDir": c.PrimaryIPAMDir}},
			map[string]any{"type": "loopback"},
		},
	}, "", "  ")
	wrapper, err := c.runcWrapper()
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data string
		mode os.FileMode
	}{
		{"net.d/10-" + c.PrimaryNetwork + ".conflist", string(primary), 0o644},
		{"policy.json", `{"default":[{"type":"insecureAcceptAnything"}]}` + "\n", 0o644},
		{"registries.conf", "unqualified-search-registries = []\n", 0o644},
		{"storage.conf", fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n",
			c.path("root"), c.path("runroot")), 0o644},
		{"runc-wrapper", wrapper, 0o755},
		{"crio.conf", c.config(o), 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(c.path(f.name), []byte(f.data), f.mode); err != nil {
			return err
		}
	}
	for _, src := range o.DropIns {
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("crio drop-in: %w", err)
		}
		if err := os.WriteFile(filepath.Join(c.path("crio.conf.d"), filepath.Base(src)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (c *CRIO) path(name string) string { return filepath.Join(c.Dir, name) }

// config renders crio.conf. Every path CRI-O would otherwise take from the
// host (/var/run/crio, /var/lib/crio, /etc/crio, /run/runc, /var/run/netns)
// is private; hostport mapping is off so CRI-O adds no iptables/nftables
// rules; irqbalance restore is off so it does not touch /etc/sysconfig.
func (c *CRIO) config(o CRIOOpts) string {
	conmon := filepath.Join(c.binDir, "conmon")
	return fmt.Sprintf(`[crio]
root = %[1]q
runroot = %[2]q
storage_driver = "overlay"
log_dir = %[3]q
version_file = %[4]q
version_file_persist = ""
clean_shutdown_file = %[5]q
internal_wipe = true

[crio.api]
listen = %[6]q
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
log_level = %[7]q
cgroup_manager = "cgroupfs"
selinux = false
apparmor_profile = "unconfined"
seccomp_profile = ""
default_runtime = "runc"
drop_infra_ctr = %[8]t
namespaces_dir = %[9]q
pinns_path = %[10]q
container_exits_dir = %[11]q
container_attach_socket_dir = %[12]q
hooks_dir = [%[13]q]
cdi_spec_dirs = [%[14]q]
decryption_keys_path = %[15]q
default_mounts_file = ""
disable_hostport_mapping = true
irqbalance_config_file = %[16]q
irqbalance_config_restore_file = "disable"
enable_criu_support = false

[crio.runtime.runtimes.runc]
runtime_path = %[17]q
runtime_type = "oci"
runtime_root = %[18]q
monitor_path = %[19]q
monitor_cgroup = "pod"
monitor_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]

[crio.image]
pause_image = %[20]q
pause_image_auth_file = ""
pinned_images = [%[20]q]
global_auth_file = ""
namespaced_auth_dir = %[21]q
signature_policy = %[22]q
signature_policy_dir = %[23]q
big_files_temporary_dir = %[24]q

[crio.network]
network_dir = %[25]q
plugin_dirs = [%[26]q]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = true
nri_listen = %[27]q
nri_plugin_dir = %[28]q
nri_plugin_config_dir = %[29]q
nri_plugin_registration_timeout = "5s"
nri_plugin_request_timeout = %[30]q
`, c.path("root"), c.path("runroot"), c.path("pod-logs"), c.path("version"), c.path("clean.shutdown"),
		c.Address, o.LogLevel, o.DropInfra, c.NamespacesDir, filepath.Join(c.binDir, "pinns"),
		c.path("exits"), c.path("attach"), c.HooksDir, c.path("cdi"), c.path("keys"),
		c.path("irqbalance"), c.path("runc-wrapper"), c.path("runc"), conmon,
		PauseImage, c.path("auth"), c.path("policy.json"), c.path("policies"), c.path("tmp"),
		c.path("net.d"), c.tools.CNIDir, c.NRISocket, c.NRIPluginDir, c.NRIConfDir,
		o.PluginRequestTimeout.String())
}

// ConfigFile is crio.conf; the drop-ins it reads after it are in ConfDir.
func (c *CRIO) ConfigFile() string { return c.path("crio.conf") }

// ConfDir is CRI-O's drop-in dir (CRIOOpts.DropIns).
func (c *CRIO) ConfDir() string { return c.path("crio.conf.d") }
