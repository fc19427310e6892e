package nodeconf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
)

// A drop-in node-setup writes ends in a marker line: a TOML comment with
// the sha256 of the lines above it. A drop-in whose marker still matches is
// exactly what node-setup wrote (perhaps an older release's) and may be
// replaced; one without a marker, or whose lines above it changed, was
// written or edited by someone else and is kept unless the admin says
// otherwise (node-setup --force).

// markerPrefix starts the marker line.
const markerPrefix = "# written by nri-cni node-setup; sha256 of the lines above: "

// MarkDropIn is data as node-setup writes it: with the marker line.
func MarkDropIn(data []byte) []byte {
	out := append([]byte{}, data...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	sum := sha256.Sum256(out)
	return append(append(out, markerPrefix...), hex.EncodeToString(sum[:])+"\n"...)
}

// DropInStatus is how an installed drop-in compares with the one node-setup
// would write.
type DropInStatus int

const (
	// DropInCurrent: the same lines (with the marker or without it: a copy
	// of deploy/node's file installed by hand or by kind's patch).
	DropInCurrent DropInStatus = iota
	// DropInOurs: other lines, with a matching marker: written by a
	// node-setup (another release's) and not changed since.
	DropInOurs
	// DropInEdited: other lines and no matching marker: edited by hand or
	// written by another tool.
	DropInEdited
)

// JudgeDropIn compares an installed drop-in with want (deploy/node's bytes,
// without the marker).
func JudgeDropIn(installed, want []byte) DropInStatus {
	body, marked := unmark(installed)
	if bytes.Equal(installed, want) || bytes.Equal(installed, MarkDropIn(want)) {
		return DropInCurrent
	}
	if marked && bytes.Equal(MarkDropIn(body), installed) {
		return DropInOurs
	}
	return DropInEdited
}

// unmark splits off the last line if it is a marker line.
func unmark(data []byte) (body []byte, marked bool) {
	trimmed := bytes.TrimSuffix(data, []byte("\n"))
	i := bytes.LastIndexByte(trimmed, '\n') + 1
	if !bytes.HasPrefix(trimmed[i:], []byte(markerPrefix)) {
		return data, false
	}
	return data[:i], true
}
