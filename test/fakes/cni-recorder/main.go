// Command cni-recorder is a fake CNI plugin for tests. It appends one JSON
// line per invocation (command, container id, netns, ifname, CNI_ARGS, the
// network) to the file named by "recordFile" in its config, and can be told
// to fail, hang or print garbage. As the first plugin it returns a result
// with "ip"; chained, it passes prevResult through.
//
//	{"type": "cni-recorder", "recordFile": "/tmp/x/calls.jsonl",
//	 "failOn": "ADD", "failMsg": "boom", "failWhile": "/tmp/x/fail", "failInNetns": false, "sleep": "5s", "garbage": false, "crash": false,
//	 "holdOn": "DEL", "holdWhile": "/tmp/x/hold", "ip": "10.99.0.5/24",
//	 "mtu": 9000, "gateway": "10.99.0.1", "routes": [{"dst": "0.0.0.0/0", "gw": "10.99.0.1"}]}
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// Conf is the plugin's config.
type Conf struct {
	types.PluginConf
	RecordFile string `json:"recordFile"`
	FailOn     string `json:"failOn"`  // command(s) to fail, comma-separated
	FailMsg    string `json:"failMsg"` // error message
	// FailWhile, if set, limits failOn to while this file exists.
	FailWhile string `json:"failWhile"`
	// FailInNetns limits failOn to calls with a network namespace (a DEL
	// that fails in the pod's namespace, where an empty-netns DEL works).
	FailInNetns bool   `json:"failInNetns"`
	Sleep       string `json:"sleep"`   // sleep before answering ADD
	Garbage     bool   `json:"garbage"` // print non-JSON on ADD
	Crash       bool   `json:"crash"`   // die on ADD without a word (exit 2)
	IP          string `json:"ip"`      // address to return when first in chain
	// MTU, Gateway and Routes go into that result too (its interface's
	// MTU, the address's gateway, the routes).
	MTU     int            `json:"mtu"`
	Gateway string         `json:"gateway"`
	Routes  []*types.Route `json:"routes"`
	// HoldOn (commands, comma-separated) waits, after recording, for as
	// long as the file HoldWhile exists: a stuck plugin the test releases.
	// "{id}" in HoldWhile stands for the container id (one stuck pod).
	HoldOn    string `json:"holdOn"`
	HoldWhile string `json:"holdWhile"`
	// MoveDevice moves the device's host link into the pod (see above).
	MoveDevice bool `json:"moveDevice"`
	// DeviceID is the device a device-backed network's runtime put into
	// the config (runtimeConfig.deviceID wins).
	DeviceID string `json:"deviceID"`
	// RuntimeConfig is what libcni injected for the declared capabilities.
	RuntimeConfig json.RawMessage `json:"runtimeConfig,omitempty"`
	// Args is the config's "args" (a NAD element's cni-args are in it).
	Args json.RawMessage `json:"args,omitempty"`
}

// Call is one recorded invocation.
type Call struct {
	Cmd         string `json:"cmd"`
	ContainerID string `json:"containerID"`
	Netns       string `json:"netns"`
	IfName      string `json:"ifname"`
	Args        string `json:"args"`
	Network     string `json:"network"`
	Time        string `json:"time"`
	// RuntimeConfig as received (capability args).
	RuntimeConfig json.RawMessage `json:"runtimeConfig,omitempty"`
	// NetnsIno is the inode of the namespace CNI_NETNS named at the call
	// (0: none, or gone): the namespace, whatever path named it.
	NetnsIno uint64 `json:"netnsIno,omitempty"`
	// DeviceID is the config's "deviceID" key, if any.
	DeviceID string `json:"deviceID,omitempty"`
	// ConfArgs is the config's "args" key, if any.
	ConfArgs json.RawMessage `json:"confArgs,omitempty"`
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    func(a *skel.CmdArgs) error { return handle("ADD", a) },
		Del:    func(a *skel.CmdArgs) error { return handle("DEL", a) },
		Check:  func(a *skel.CmdArgs) error { return handle("CHECK", a) },
		GC:     func(a *skel.CmdArgs) error { return handle("GC", a) },
		Status: func(a *skel.CmdArgs) error { return handle("STATUS", a) },
	}, version.All, "cni-recorder: a recording fake CNI plugin for tests")
}

// failing: failOn applies (always, or while the failWhile file exists).
func failing(conf *Conf) bool {
	if conf.FailWhile == "" {
		return true
	}
	_, err := os.Stat(conf.FailWhile)
	return err == nil
}

func handle(cmd string, a *skel.CmdArgs) error {
	conf := &Conf{}
	if err := json.Unmarshal(a.StdinData, conf); err != nil {
		return fmt.Errorf("cni-recorder: bad config: %w", err)
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return err
	}
	if err := record(conf, cmd, a); err != nil {
		return err
	}
	for _, c := range strings.Split(conf.HoldOn, ",") {
		if strings.TrimSpace(c) != cmd || conf.HoldWhile == "" {
			continue
		}
		hold := strings.ReplaceAll(conf.HoldWhile, "{id}", a.ContainerID)
		for {
			if _, err := os.Stat(hold); err != nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if cmd == "ADD" && conf.Sleep != "" {
		d, err := time.ParseDuration(conf.Sleep)
		if err != nil {
			return err
		}
		time.Sleep(d)
	}
	for _, c := range strings.Split(conf.FailOn, ",") {
		if strings.TrimSpace(c) == cmd && failing(conf) && (!conf.FailInNetns || a.Netns != "") {
			msg := conf.FailMsg
			if msg == "" {
				msg = "cni-recorder: told to fail " + cmd
			}
			return types.NewError(types.ErrInternal, msg, "")
		}
	}
	if cmd == "DEL" && conf.MoveDevice {
		return returnDevice(conf, a)
	}
	if cmd != "ADD" {
		return nil
	}
	if conf.Crash {
		os.Exit(2)
	}
	if conf.Garbage {
		fmt.Print("this is not JSON {")
		os.Exit(0)
	}
	var moved *current.Interface
	if conf.MoveDevice {
		var err error
		if moved, err = moveDevice(conf, a); err != nil {
			return err
		}
	}
	if conf.PrevResult != nil {
		if moved == nil {
			return types.PrintResult(conf.PrevResult, conf.CNIVersion)
		}
		prev, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return err
		}
		prev.Interfaces = append(prev.Interfaces, moved)
		return types.PrintResult(prev, conf.CNIVersion)
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	if moved != nil {
		res.Interfaces = []*current.Interface{moved}
	}
	if conf.IP != "" {
		ip, ipnet, err := net.ParseCIDR(conf.IP)
		if err != nil {
			return err
		}
		ipnet.IP = ip
		idx := 0
		if moved == nil {
			res.Interfaces = []*current.Interface{{Name: a.IfName, Sandbox: a.Netns}}
		}
		res.Interfaces[0].Mtu = conf.MTU
		res.IPs = []*current.IPConfig{{Address: *ipnet, Interface: &idx, Gateway: net.ParseIP(conf.Gateway)}}
		res.Routes = conf.Routes
	}
	return types.PrintResult(res, conf.CNIVersion)
}

func netnsIno(path string) uint64 {
	var st syscall.Stat_t
	if path == "" || syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

func record(conf *Conf, cmd string, a *skel.CmdArgs) error {
	if conf.RecordFile == "" {
		return nil
	}
	line, err := json.Marshal(Call{
		Cmd: cmd, ContainerID: a.ContainerID, Netns: a.Netns, IfName: a.IfName,
		Args: a.Args, Network: conf.Name, Time: time.Now().Format(time.RFC3339Nano), RuntimeConfig: conf.RuntimeConfig,
		NetnsIno: netnsIno(a.Netns),
		DeviceID: conf.DeviceID,
		ConfArgs: conf.Args,
	})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(conf.RecordFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("cni-recorder: %w", err)
	}
	defer f.Close()
	_, err = f.Write(append(line, '\n'))
	return err
}
