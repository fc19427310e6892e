package state

// Record lines carry a format version and a checksum, as the kubelet's
// checkpoints do: a line reads
//
//	{"v":1,"sum":"1a2b3c4d","id":"…",…}
//
// where sum is the CRC-32C (Castagnoli) of the record's own JSON object,
// i.e. the line with `"v":1,"sum":"…",` taken out. The two fields lead the
// object and the record's fields follow unchanged, so an older nri-cni,
// which ignores unknown fields, still reads the line (a rollback keeps its
// records); a line without them is a record of an older nri-cni (format 0),
// read as it is and rewritten in the current format at the next Put. A line
// whose checksum does not match (bit rot, a write torn inside the line)
// does not count, as a torn tail does not: the line before it is the
// record. A line of a newer format is refused with ErrNewerRecord: this
// nri-cni does not know what it means, so it neither uses nor rewrites it.

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

// Version is the record format this nri-cni writes and the newest it reads.
const Version = 1

// ErrNewerRecord: a record written by a newer nri-cni (format above Version).
var ErrNewerRecord = errors.New("record of a newer nri-cni")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sealed is body (a record's JSON object) as a line of the current format.
func sealed(body []byte) []byte {
	out := make([]byte, 0, len(body)+24)
	out = fmt.Appendf(out, `{"v":%d,"sum":"%08x",`, Version, crc32.Checksum(body, castagnoli))
	return append(out, body[1:]...)
}

// opened is the record's JSON object of a line and its format version: the
// line itself for format 0; an error for a bad checksum or a newer format.
func opened(line []byte) (body []byte, version int, err error) {
	const head = `{"v":`
	if !bytes.HasPrefix(line, []byte(head)) {
		return line, 0, nil
	}
	rest := line[len(head):]
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return nil, 0, errors.New("format version without a record")
	}
	v, err := strconv.Atoi(string(rest[:end]))
	if err != nil || v < 1 {
		return nil, 0, fmt.Errorf("format version %q", rest[:min(end, 16)])
	}
	if v > Version {
		return nil, v, fmt.Errorf("%w: format %d, this nri-cni reads formats up to %d (upgrade nri-cni; the record is left as it is)",
			ErrNewerRecord, v, Version)
	}
	rest = rest[end:]
	const sumKey = `,"sum":"`
	if !bytes.HasPrefix(rest, []byte(sumKey)) || len(rest) < len(sumKey)+10 || string(rest[len(sumKey)+8:len(sumKey)+10]) != `",` {
		return nil, v, errors.New("format 1 without its checksum")
	}
	want, err := strconv.ParseUint(string(rest[len(sumKey):len(sumKey)+8]), 16, 32)
	if err != nil {
		return nil, v, errors.New("format 1 with a malformed checksum")
	}
	body = append([]byte{'{'}, rest[len(sumKey)+10:]...)
	if got := crc32.Checksum(body, castagnoli); uint64(got) != want {
		return nil, v, fmt.Errorf("checksum mismatch (%08x, line says %08x)", got, want)
	}
	return body, v, nil
}
