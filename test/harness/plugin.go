package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Secondary is a CNI network for nri-cni: a bridge + host-local chain on its
// own bridge and subnet, optionally followed by extra plugins.
type Secondary struct {
	Name    string
	Bridge  string
	Subnet  string
	IPAMDir string
	Extra   []map[string]any
}

// NewSecondary picks unique names under dir.
func NewSecondary(dir string) Secondary {
	return Secondary{Name: RandomName("sec"), Bridge: RandomName("ncsb"), Subnet: RandomSubnet(200),
		IPAMDir: filepath.Join(dir, "ipam-secondary")}
}

// Conflist renders the network config.
func (s Secondary) Conflist() []byte {
	plugins := []any{map[string]any{"type": "bridge", "bridge": s.Bridge, "isGateway": false, "ipMasq": false,
		"ipam": map[string]any{"type": "host-local", "subnet": s.Subnet, "dataDir": s.IPAMDir}}}
	for _, e := range s.Extra {
		plugins = append(plugins, e)
	}
	data, _ := json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": s.Name, "plugins": plugins}, "", "  ")
	return data
}

// IPFiles lists host-local's allocation files for the network (one per IP).
func (s Secondary) IPFiles() []string {
	entries, _ := os.ReadDir(filepath.Join(s.IPAMDir, s.Name))
	var out []string
	for _, e := range entries {
		if strings.Count(e.Name(), ".") == 3 {
			out = append(out, e.Name())
		}
	}
	return out
}

// DeleteBridge removes the secondary bridge, if it exists.
func (s Secondary) DeleteBridge() { _ = exec.Command("ip", "link", "del", s.Bridge).Run() }

// PluginConfig is the subset of nri.conf the harness writes.
type PluginConfig struct {
	ConfDir       string   `json:"confDir"`
	BinDirs       []string `json:"binDirs"`
	CacheDir      string   `json:"cacheDir"`
	StateDir      string   `json:"stateDir"`
	Networks      []string `json:"networks,omitempty"`
	CNITimeout    string   `json:"cniTimeout,omitempty"`
	FailurePolicy string   `json:"failurePolicy,omitempty"`
	PodSelection  bool     `json:"podSelection,omitempty"`
	// ParallelAttach and StatusInterval: as in nri.conf ("" = default).
	ParallelAttach bool   `json:"parallelAttach,omitempty"`
	StatusInterval string `json:"statusInterval,omitempty"`
	// PodCapabilities: nil = nri-cni's default (bandwidth only).
	PodCapabilities []string `json:"podCapabilities,omitempty"`
	Namespaces      *struct {
		Include []string `json:"include,omitempty"`
		Exclude []string `json:"exclude,omitempty"`
	} `json:"namespaces,omitempty"`
	LogLevel string `json:"logLevel,omitempty"`
	LogFile  string `json:"logFile,omitempty"`
}

// NewPluginConfig lays out nri-cni's dirs under dir and writes the network.
func NewPluginConfig(dir string, tools Tools, net Secondary, extraBinDirs ...string) (PluginConfig, error) {
	cfg := PluginConfig{
		ConfDir: filepath.Join(dir, "net.d"), BinDirs: append([]string{tools.CNIDir}, extraBinDirs...),
		CacheDir: filepath.Join(dir, "cni-cache"), StateDir: filepath.Join(dir, "state"),
		LogLevel: "debug", LogFile: filepath.Join(dir, "nri-cni.log"),
	}
	if err := os.MkdirAll(cfg.ConfDir, 0o755); err != nil {
		return cfg, err
	}
	return cfg, os.WriteFile(filepath.Join(cfg.ConfDir, "10-"+net.Name+".conflist"), net.Conflist(), 0o644)
}

// Write stores the config as JSON at path.
func (p PluginConfig) Write(path string) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// StateFiles lists nri-cni's records.
func (p PluginConfig) StateFiles() []string {
	m, _ := filepath.Glob(filepath.Join(p.StateDir, "*.json"))
	return m
}

// CacheFiles lists libcni's cached results.
func (p PluginConfig) CacheFiles() []string {
	m, _ := filepath.Glob(filepath.Join(p.CacheDir, "results", "*"))
	return m
}

// Log returns nri-cni's log.
func (p PluginConfig) Log() string {
	data, _ := os.ReadFile(p.LogFile)
	return string(data)
}

// Plugin is an `nri-cni run` process.
type Plugin struct {
	cmd  *exec.Cmd
	done chan struct{}
	Cfg  PluginConfig
}

// StartPlugin runs `bin run --config cfgPath --socket <rt's NRI socket>
// [extra...]` (e.g. --metrics-addr) and waits until the runtime reports it
// registered and synchronized.
func StartPlugin(ctx context.Context, rt Runtime, bin, cfgPath string, cfg PluginConfig, extra ...string) (*Plugin, error) {
	synced := rt.PluginSynced("10-nri-cni")
	before := rt.CountLog(synced)
	out, err := os.OpenFile(cfg.LogFile+".stderr", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(bin, append([]string{"run", "--config", cfgPath, "--socket", rt.NRIAddress()}, extra...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Plugin{cmd: cmd, done: make(chan struct{}), Cfg: cfg}
	go func() { _ = cmd.Wait(); close(p.done) }()
	if err := rt.WaitLog(ctx, synced, before+1, 15*time.Second); err != nil {
		p.Kill()
		return nil, fmt.Errorf("%w\nnri-cni log:\n%s", err, cfg.Log())
	}
	return p, nil
}

// Pid returns the plugin's pid.
func (p *Plugin) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM and waits for the exit; SIGKILL after 10s.
func (p *Plugin) Stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
		return fmt.Errorf("nri-cni did not exit within 10s of SIGTERM")
	}
	if st := p.cmd.ProcessState; st != nil && !st.Success() {
		return fmt.Errorf("nri-cni exited with %s", st)
	}
	return nil
}

// Kill sends SIGKILL and waits.
func (p *Plugin) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stats asks the plugin for its stats line (SIGUSR1) and reads its RSS.
func (p *Plugin) Stats(ctx context.Context) (goroutines, rssKiB int, err error) {
	before := strings.Count(p.Cfg.Log(), "msg=stats")
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(p.Cfg.Log(), "msg=stats") <= before {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("no stats line from nri-cni within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	log := p.Cfg.Log()
	line := log[strings.LastIndex(log, "msg=stats"):]
	if i := strings.Index(line, "goroutines="); i >= 0 {
		_, _ = fmt.Sscanf(line[i:], "goroutines=%d", &goroutines)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return goroutines, 0, err
	}
	if i := strings.Index(string(status), "VmRSS:"); i >= 0 {
		_, _ = fmt.Sscanf(string(status[i:]), "VmRSS: %d", &rssKiB)
	}
	return goroutines, rssKiB, nil
}
