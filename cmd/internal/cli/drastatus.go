package cli

// `nri-cni status` on the DRA driver's view of the kubelet's DRA
// checkpoint: the running driver saves a report at each change
// (state.CheckpointReport, kube/dra/records.go); status prints it, names
// the file and the error when it cannot be read, and the claims whose pods
// are held back. Nothing is printed where the driver never ran.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/nri-cni/nri-cni/state"
)

// printDRACheckpoint prints the report under "DRA checkpoint"; false when
// there is none.
func printDRACheckpoint(w io.Writer, stateDir string) bool {
	r, err := state.ReadCheckpointReport(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		fmt.Fprintf(w, "DRA checkpoint: unknown: %v\n", err)
		return true
	}
	since := r.Since.Format(time.RFC3339)
	if r.Readable {
		fmt.Fprintf(w, "DRA checkpoint (since %s): the kubelet's %s is read\n", since, r.Path)
	} else {
		fmt.Fprintf(w, "DRA checkpoint (since %s): CANNOT READ the kubelet's %s (%s): %s\n", since, r.Path, r.Reason, r.Error)
		fmt.Fprintln(w, "  a lost prepared-claim record is detected only for pods nri-cni attached before (docs/dra.md)")
	}
	for _, h := range r.HeldBack {
		fmt.Fprintf(w, "  held back: %s\n", h)
	}
	if len(r.Unplaced) > 0 {
		fmt.Fprintf(w, "  unreadable records of claims nri-cni cannot place (uids %s): every pod nri-cni has not attached "+
			"before is held back until the checkpoint can be read or the kubelet prepares or unprepares them again\n",
			strings.Join(r.Unplaced, ", "))
	}
	return true
}

// warnDRACheckpoint says on w (stderr, beside `status --json`'s rows) that
// the checkpoint cannot be read, if so.
func warnDRACheckpoint(w io.Writer, stateDir string) {
	r, err := state.ReadCheckpointReport(stateDir)
	if err != nil || r.Readable {
		return
	}
	fmt.Fprintf(w, "nri-cni: status: DRA: cannot read the kubelet's DRA checkpoint %s (%s) since %s: %s; %d claims held back, "+
		"%d unplaced records (nri-cni status --dra --json)\n", r.Path, r.Reason, r.Since.Format(time.RFC3339), r.Error,
		len(r.HeldBack), len(r.Unplaced))
}

// draStatus: `nri-cni status --dra [--json]`.
func draStatus(a *app, stateDir string, asJSON bool) int {
	r, err := state.ReadCheckpointReport(stateDir)
	if err != nil {
		return a.fail("status: no report of the DRA driver (is it on, and has nri-cni run?): %v", err)
	}
	if asJSON {
		return a.printJSON(r)
	}
	printDRACheckpoint(a.stdout, stateDir)
	return 0
}
