package nodeconf

// Whether the running runtime has loaded the files Check judged. A runtime
// reads its config when it starts and never again (containerd has no
// reload; CRI-O's SIGHUP reload leaves the NRI options alone), so a file
// changed after the runtime's process started is not in effect until a
// restart. The process is the peer of a unix socket the runtime serves
// (SO_PEERCRED): its NRI socket, which nri-cni holds a connection to, or
// its API socket as its config names it (Report.Socket). Its start time is
// /proc/<pid>/stat's starttime.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// State is how the node stands for pods that require nri-cni.
type State string

// States, as `nri-cni status`, `node-setup --check` and the metric
// nri_cni_node_fail_closed_state name them.
const (
	// StateFailClosed: the files are set up and the running runtime loaded
	// them (or no runtime runs: it loads them when it starts).
	StateFailClosed State = "fail-closed"
	// StateRestartPending: the files are set up, but a file was changed
	// after the running runtime started: it runs without the change until
	// it is restarted.
	StateRestartPending State = "restart-pending"
	// StateFailOpen: the files are not set up (Findings).
	StateFailOpen State = "fail-open"
	// StateUnverified: the files are set up; whether the running runtime
	// loaded them is not known (its process is not visible here).
	StateUnverified State = "unverified"
)

// States lists every State (the metric's label values).
var States = []State{StateFailClosed, StateRestartPending, StateFailOpen, StateUnverified}

// Running is the running runtime as found.
type Running struct {
	Pid     int       `json:"pid,omitempty"`
	Started time.Time `json:"started,omitzero"`
	// NotRunning: nothing serves the runtime's socket; it loads the files
	// when it starts.
	NotRunning bool `json:"notRunning,omitempty"`
	// Unknown says why the running runtime could not be judged ("": it was).
	Unknown string `json:"unknown,omitempty"`
}

// State is the node's state: Findings first, then the running runtime.
func (r Report) State() State {
	switch {
	case !r.OK():
		return StateFailOpen
	case r.Running == nil || r.Running.Unknown != "":
		return StateUnverified
	case len(r.Changed) > 0:
		return StateRestartPending
	}
	return StateFailClosed
}

// Judge records the running runtime rt in r and lists the files and dirs
// of r (read under o's root) changed after it started.
func (r *Report) Judge(o Options, rt Running) {
	r.Running, r.Changed = &rt, nil
	if rt.Unknown != "" || rt.NotRunning {
		return
	}
	fsys := fsOf(o)
	for _, p := range append(append([]string{}, r.Files...), r.Dirs...) {
		fi, err := fs.Stat(fsys, rel(p))
		if err == nil && fi.ModTime().After(rt.Started) {
			r.Changed = append(r.Changed, p)
		}
	}
}

// RuntimeAt finds the runtime serving the unix socket at host path socket
// under root: its pid (the socket's peer) and its start. Nothing listening
// there is NotRunning; a peer this machine cannot see (another PID
// namespace: nri-cni without hostPID) is Unknown, with why.
func RuntimeAt(ctx context.Context, root, socket string) Running {
	p, err := HostPath(root, socket)
	if err != nil {
		return Running{Unknown: fmt.Sprintf("%s: %v", socket, err)}
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	conn, err := d.DialContext(ctx, "unix", p)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return Running{NotRunning: true}
	}
	if err != nil {
		return Running{Unknown: fmt.Sprintf("the runtime's socket %s: %v", socket, err)}
	}
	defer conn.Close()
	pid, err := PeerPid(conn)
	if err != nil {
		return Running{Unknown: fmt.Sprintf("the runtime's socket %s: %v", socket, err)}
	}
	return RuntimeProcess(pid)
}

// RuntimeProcess is the runtime with process id pid (0: not visible here),
// with its start read from /proc.
func RuntimeProcess(pid int) Running {
	if pid <= 0 {
		return Running{Unknown: "the runtime's process is not visible here (another PID namespace: run with hostPID)"}
	}
	start, err := ProcessStart("/proc", pid)
	if err != nil {
		return Running{Pid: pid, Unknown: err.Error()}
	}
	return Running{Pid: pid, Started: start}
}

// PeerPid is the process id of the peer of a unix socket connection, as the
// kernel saw it when the peer called listen() or connect() (0: the peer is
// in a PID namespace this process cannot see).
func PeerPid(conn net.Conn) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("not a socket (%T)", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var pid int
	var credErr error
	if err := raw.Control(func(fd uintptr) { pid, credErr = PeerPidFd(int(fd)) }); err != nil {
		return 0, err
	}
	return pid, credErr
}

// PeerPidFd is PeerPid of an open socket fd (a pre-launched plugin's
// NRI_PLUGIN_SOCKET).
func PeerPidFd(fd int) (int, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	return int(cred.Pid), nil
}

// userHZ is the unit of /proc/<pid>/stat's times (the kernel's USER_HZ,
// 100 on every architecture Linux exports to user space).
const userHZ = 100

// ProcessStart is when process pid started, wall clock, from
// <procDir>/<pid>/stat's starttime (ticks since boot), truncated to a tick
// (10 ms): at most that much before the true start.
func ProcessStart(procDir string, pid int) (time.Time, error) {
	file := filepath.Join(procDir, strconv.Itoa(pid), "stat")
	data, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}, fmt.Errorf("the runtime's start: %w", err)
	}
	// The command name (field 2) is in parentheses and may hold anything:
	// the fields after the last ')' start with field 3.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return time.Time{}, fmt.Errorf("the runtime's start: %s: no command name", file)
	}
	fields := strings.Fields(string(data[i+1:]))
	const starttime = 22 - 3
	if len(fields) <= starttime {
		return time.Time{}, fmt.Errorf("the runtime's start: %s: %d fields", file, len(fields)+2)
	}
	ticks, err := strconv.ParseUint(fields[starttime], 10, 63)
	if err != nil {
		return time.Time{}, fmt.Errorf("the runtime's start: %s: starttime: %w", file, err)
	}
	var boot, real unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		return time.Time{}, fmt.Errorf("the runtime's start: CLOCK_BOOTTIME: %w", err)
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &real); err != nil {
		return time.Time{}, fmt.Errorf("the runtime's start: CLOCK_REALTIME: %w", err)
	}
	since := time.Duration(boot.Nano()) - time.Duration(ticks)*time.Second/userHZ
	return time.Unix(0, real.Nano()).Add(-since), nil
}
