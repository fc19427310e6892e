package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestRecorderMovesDevice (root): with moveDevice, the built plugin's ADD
// moves the host link named as the device (runtimeConfig.deviceID, or the
// config's deviceID) into the netns as CNI_IFNAME, up, and reports it; its
// DEL gives it back to the host under its name, and again, and after the
// netns is gone, and without a netns, is a success. The calls are recorded
// first, with the config's deviceID.
func TestRecorderMovesDevice(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	bin, err := testenv.BuildRecorder(dir)
	require.NoError(t, err)

	for _, tc := range []struct {
		name       string
		viaRuntime bool // runtimeConfig.deviceID (else the config's deviceID)
	}{{"runtimeConfig", true}, {"config key", false}} {
		t.Run(tc.name, func(t *testing.T) {
			id := testenv.UniqueName("rdv")
			mac := hostVeth(t, id)
			podNS := testenv.NewNetNS(t)
			record := filepath.Join(t.TempDir(), "calls.jsonl")
			conf := map[string]any{"cniVersion": "1.0.0", "name": "devnet", "type": "cni-recorder",
				"recordFile": record, "moveDevice": true}
			if tc.viaRuntime {
				conf["capabilities"] = map[string]bool{"deviceID": true}
				conf["runtimeConfig"] = map[string]string{"deviceID": id}
				conf["deviceID"] = "not-this-one"
			} else {
				conf["deviceID"] = id
			}
			call := func(cmd, netns string) (string, error) {
				return runPlugin(bin, cmd, "ctr-"+id, netns, "net1", conf)
			}

			out, err := call("ADD", podNS.Path())
			require.NoError(t, err, "ADD")
			var res current.Result
			require.NoError(t, json.Unmarshal([]byte(out), &res), "%s", out)
			require.Len(t, res.Interfaces, 1, "%s", out)
			assert.Equal(t, current.Interface{Name: "net1", Mac: mac, Sandbox: podNS.Path()}, *res.Interfaces[0])
			assert.False(t, linkIn(t, nil, id), "%s left the host", id)
			require.True(t, linkIn(t, podNS, "net1"), "net1 in the netns")
			require.NoError(t, podNS.Do(func(ns.NetNS) error {
				l, err := netlink.LinkByName("net1")
				if err == nil {
					assert.Equal(t, mac, l.Attrs().HardwareAddr.String(), "the device itself")
					assert.NotZero(t, l.Attrs().RawFlags&0x1, "net1 up (IFF_UP)")
				}
				return err
			}))

			_, err = call("DEL", podNS.Path())
			require.NoError(t, err, "DEL")
			assert.True(t, linkIn(t, nil, id), "%s back on the host", id)
			assert.False(t, linkIn(t, podNS, "net1"), "net1 gone from the netns")
			_, err = call("DEL", podNS.Path())
			assert.NoError(t, err, "a second DEL: nothing to give back")
			_, err = call("DEL", "")
			assert.NoError(t, err, "a DEL without a netns")
			path := podNS.Path()
			testenv.DeleteNetNS(t, podNS)
			_, err = call("DEL", path)
			assert.NoError(t, err, "a DEL after the netns is gone")

			calls := testenv.ReadCalls(t, record)
			var cmds []string
			for _, c := range calls {
				cmds = append(cmds, c.Cmd)
				if !tc.viaRuntime {
					assert.Equal(t, id, c.DeviceID, "%s recorded with the config's deviceID", c.Cmd)
				}
			}
			assert.Equal(t, []string{"ADD", "DEL", "DEL", "DEL", "DEL"}, cmds)
		})
	}

	t.Run("no such device", func(t *testing.T) {
		podNS := testenv.NewNetNS(t)
		conf := map[string]any{"cniVersion": "1.0.0", "name": "devnet", "type": "cni-recorder", "moveDevice": true,
			"deviceID": testenv.UniqueName("rdv")}
		_, err := runPlugin(bin, "ADD", "ctr-none", podNS.Path(), "net1", conf)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "on the host")
		conf["deviceID"] = ""
		_, err = runPlugin(bin, "ADD", "ctr-none", podNS.Path(), "net1", conf)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no deviceID")
	})
}

// hostVeth creates a veth pair id/<id>p on the host (the device and the peer
// that stays) and returns the device's MAC; the cleanup deletes what is left.
func hostVeth(t *testing.T, id string) string {
	t.Helper()
	require.NoError(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: id}, PeerName: id + "p"}))
	t.Cleanup(func() {
		for _, name := range []string{id, id + "p"} {
			if l, err := netlink.LinkByName(name); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
	})
	l, err := netlink.LinkByName(id)
	require.NoError(t, err)
	return l.Attrs().HardwareAddr.String()
}

// linkIn reports whether name exists in n (nil: the host's netns).
func linkIn(t *testing.T, n ns.NetNS, name string) bool {
	t.Helper()
	found := false
	look := func() error {
		_, err := netlink.LinkByName(name)
		if errors.As(err, &netlink.LinkNotFoundError{}) {
			return nil
		}
		found = err == nil
		return err
	}
	var err error
	if n == nil {
		err = look()
	} else {
		err = n.Do(func(ns.NetNS) error { return look() })
	}
	require.NoError(t, err)
	return found
}

// runPlugin execs the plugin as a runtime does and returns its stdout; a
// failure's error holds its output.
func runPlugin(bin, cmd, containerID, netns, ifname string, conf map[string]any) (string, error) {
	data, err := json.Marshal(conf)
	if err != nil {
		return "", err
	}
	c := exec.Command(bin)
	c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+netns,
		"CNI_IFNAME="+ifname, "CNI_PATH="+filepath.Dir(bin))
	c.Stdin = bytes.NewReader(data)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return stdout.String(), errors.Join(err, errors.New(stdout.String()+stderr.String()))
	}
	return stdout.String(), nil
}
