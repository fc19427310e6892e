// Package state persists nri-cni's attachment records: one file per sandbox
// (or hook-mode container) in the state directory. The file is a short
// journal of JSON lines, each a complete record with its format version and
// checksum (envelope.go); the last valid line is the record. It is created with one write of one line and updated by appending
// one line, so a crash of nri-cni leaves the previous record or the new one,
// never half of one: a torn last line is skipped, and an empty new file reads
// as corrupt ("no usable record"; it is written before any CNI call). A
// compaction rewrites the journal atomically (temp file + rename). Appending costs
// ~7 µs here where creating a file costs ~0.6 ms (ext4 journaling), which
// matters because an attach writes twice (intent before ADD, result after).
// A journal grown past compactAt bytes is rewritten to its last line.
//
// Durability: records are not fsynced. A process crash loses nothing (the
// page cache survives it); only a power loss or kernel crash can drop recent
// writes, and after a reboot every pod is gone anyway: the resync after the
// restart tears down whatever is left from libcni's cache — which libcni, like
// host-local's allocation files, also writes without fsync. An fsync pair
// cost 0.5 ms per write here, about 2% of a bridge+host-local ADD+DEL, for no
// end-to-end guarantee the rest of the chain does not give. A record that a
// power loss left empty is reported as corrupt and skipped.
//
// File names come from the runtime's sandbox/container id, validated here;
// nothing pod-controlled (names, namespaces, annotations) reaches a path.
package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Phase is where an attachment is in its life.
type Phase string

const (
	// PhaseAdding: ADDs are under way or failed without a clean rollback; the
	// networks listed may be partly attached and need a DEL.
	PhaseAdding Phase = "adding"
	// PhaseAttached: every network was added.
	PhaseAttached Phase = "attached"
	// PhaseTornDown: DEL ran for every network; only the record is left.
	PhaseTornDown Phase = "torndown"
)

// Network is one attached (or being attached) network.
type Network struct {
	// Name is the CNI network name: libcni's cache key, used by DEL.
	Name   string   `json:"name"`
	IfName string   `json:"ifname"`
	IPs    []string `json:"ips,omitempty"`
	Mac    string   `json:"mac,omitempty"`
	// NAD is the NetworkAttachmentDefinition ("namespace/name") the network
	// came from (Kubernetes mode), for network-status; empty for confDir
	// networks.
	NAD string `json:"nad,omitempty"`
	// DNS is what the ADD result said about DNS, if anything.
	DNS *DNS `json:"dns,omitempty"`
	// MTU is the interface's MTU as the ADD result reported it (0: none).
	MTU int `json:"mtu,omitempty"`
	// ResultGateways are the gateways of the ADD result's default routes
	// (network-status's "gateway", unless a default-route moved them).
	ResultGateways []string `json:"resultGateways,omitempty"`
	// Gateways are the pod's default routes through this interface (the
	// NPWG default-route), once set.
	Gateways []string `json:"gateways,omitempty"`
	// Pending: recorded before its ADD (a hot-plug) and not confirmed yet;
	// a restarted nri-cni DELs it and adds it again if still wanted.
	Pending bool `json:"pending,omitempty"`
	// Claim is the DRA claim device that asked for the network; nil for an
	// annotation's or nri.conf's.
	Claim *ClaimRef `json:"claim,omitempty"`
	// Default: one of nri.conf's defaultNetworks, attached when the pod
	// started; hot-plug never removes it.
	Default bool `json:"default,omitempty"`
	// Result is the ADD's CNI result, kept for claim networks only (their
	// status.devices[].data).
	Result json.RawMessage `json:"result,omitempty"`
	// Resource is the device plugin resource the network took its device
	// from (its NetworkAttachmentDefinition's resourceName), DeviceID that
	// device, as the kubelet allocated it: every DEL gets the same
	// deviceID as the ADD, also after restarts.
	Resource string `json:"resource,omitempty"`
	DeviceID string `json:"deviceID,omitempty"`
	// DeviceInfo is the NPWG device-info of the device after the ADD (its
	// CNI device-info file), for network-status.
	DeviceInfo json.RawMessage `json:"deviceInfo,omitempty"`
	// Caps are the capability args (runtimeConfig) the ADD was given:
	// portMappings, ips, mac, bandwidth, deviceID. A DEL that finds no
	// libcni cache entry (the ADD failed part-way, or nri-cni died during
	// it) gets them from here, as CNI requires: portmap's DEL, for one,
	// removes nothing without its portMappings.
	Caps map[string]any `json:"caps,omitempty"`
}

// DNS is a CNI result's DNS section.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// Record is what nri-cni knows about one sandbox's attachments.
type Record struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"` // "pod" (NRI) or "container" (OCI hook)
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
	Netns     string `json:"netns,omitempty"`
	// NetnsDev and NetnsIno identify the namespace Netns named at ADD time,
	// so teardown never DELs in a namespace that reused the path.
	NetnsDev uint64    `json:"netnsDev,omitempty"`
	NetnsIno uint64    `json:"netnsIno,omitempty"`
	Phase    Phase     `json:"phase"`
	Networks []Network `json:"networks"`
	// Args are the CNI_ARGS pairs the ADDs were given, for a DEL without
	// a libcni cache entry (see Network.Caps).
	Args    [][2]string `json:"args,omitempty"`
	Created time.Time   `json:"created"`
	Updated time.Time   `json:"updated"`
	// StatusDigest identifies the pod's network-status last confirmed
	// written to the API server (Kubernetes mode; attach.PodNetworks's
	// Digest): a resync does not write the same status again.
	StatusDigest string `json:"statusDigest,omitempty"`
	// Policy is the MultiNetworkPolicy state of the pod's netns as nri-cni
	// last programmed it (nri-cni-k8s with multiNetworkPolicy on); nil:
	// never programmed. Optional: older records load without it, and an
	// older nri-cni ignores it.
	Policy *Policy `json:"policy,omitempty"`
}

// Policy is what nri-cni programmed into a pod's netns for its
// MultiNetworkPolicies.
type Policy struct {
	// Digest is the digest of the ruleset last programmed (the table's
	// marker says the same while nobody changed it).
	Digest string `json:"digest"`
	// Quarantined are the interfaces set down because reprogramming kept
	// failing: up again at the next success.
	Quarantined []string `json:"quarantined,omitempty"`
}

// Errors.
var (
	ErrNotFound = errors.New("no record")
	ErrBadID    = errors.New("invalid sandbox id")
	// ErrCorrupt marks a record file that cannot be decoded.
	ErrCorrupt = errors.New("corrupt record")
)

const (
	suffix  = ".json"
	dirMode = 0o700
	fileMod = 0o600
)

// maxIDLen bounds a sandbox id (runtimes use 64 hex characters).
const maxIDLen = 128

// ValidID reports whether id can name a record file: 1-128 characters of
// [A-Za-z0-9_+.-] (what runc accepts), starting alphanumeric, without "..".
// (Hand-written: a regexp with {0,127} costs 0.36 ms to compile at every
// process start, and hook mode starts two processes per container.)
func ValidID(id string) error {
	ok := len(id) > 0 && len(id) <= maxIDLen && !strings.Contains(id, "..")
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		ok = alnum || i > 0 && (c == '_' || c == '+' || c == '.' || c == '-')
	}
	if !ok {
		return fmt.Errorf("%w %q", ErrBadID, id)
	}
	return nil
}

// Store is a directory of records. It is safe for concurrent use on
// different ids; callers serialise work on one id.
type Store struct {
	dir string
}

// Open creates dir (0700) if needed and tightens its mode if it exists.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(id string) (string, error) {
	if err := ValidID(id); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, id+suffix), nil
}

// compactAt: a journal larger than this is rewritten to its last record.
const compactAt = 8 << 10

// Put records rec: appends it to the sandbox's journal, or creates the
// journal atomically if there is none (or it needs compacting).
func (s *Store) Put(rec *Record) error {
	p, err := s.path(rec.ID)
	if err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding record %s: %w", rec.ID, err)
	}
	data = append(sealed(data), '\n')
	if st, err := os.Stat(p); err == nil && st.Size() < compactAt {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
		if err == nil {
			// A torn tail (a crash mid-append) has no newline: end it first,
			// so the new line stands on its own.
			last := make([]byte, 1)
			if n, _ := f.ReadAt(last, st.Size()-1); n == 1 && last[0] != '\n' {
				data = append([]byte{'\n'}, data...)
			}
			_, werr := f.Write(data) // one write(2) of a whole line
			cerr := f.Close()
			if werr == nil && cerr == nil {
				return nil
			}
			return fmt.Errorf("writing record %s: %w", p, errors.Join(werr, cerr))
		}
	} else if errors.Is(err, os.ErrNotExist) {
		// A new journal: created and written in one go. A crash in between
		// leaves an empty file, which reads as corrupt (and is handled as "no
		// usable record"): callers write before any CNI call.
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMod)
		if err == nil {
			_, werr := f.Write(data)
			cerr := f.Close()
			if werr == nil && cerr == nil {
				return nil
			}
			return fmt.Errorf("writing record %s: %w", p, errors.Join(werr, cerr))
		}
		if !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("writing record %s: %w", p, err)
		}
	}
	return s.create(p, rec.ID, data)
}

// create writes data as the whole journal, atomically.
func (s *Store) create(p, id string, data []byte) error {
	tmp, err := os.CreateTemp(s.dir, "."+id+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing record %s: %w", id, err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if err := write(tmp, data); err != nil {
		return fmt.Errorf("writing record %s: %w", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("writing record %s: %w", p, err)
	}
	return nil
}

func write(f *os.File, data []byte) error {
	if err := f.Chmod(fileMod); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Get reads the record of id: ErrNotFound if there is none, ErrCorrupt (with
// the path) if the file cannot be decoded.
func (s *Store) Get(id string) (*Record, error) {
	p, err := s.path(id)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w for %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("reading record: %w", err)
	}
	// The last complete line that decodes is the record; a torn or garbled
	// tail (a crash mid-write) falls back to the line before it.
	// A line of a newer nri-cni's format stops the search: what it says
	// supersedes the lines before it, and this nri-cni cannot read it.
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	var lastErr error = errors.New("empty file")
	for i := len(lines) - 1; i >= 0; i-- {
		body, _, err := opened(lines[i])
		if errors.Is(err, ErrNewerRecord) {
			return nil, fmt.Errorf("%w %s: %w", ErrCorrupt, p, err)
		}
		if err != nil {
			lastErr = err
			continue
		}
		var rec Record
		if err := json.Unmarshal(body, &rec); err != nil {
			lastErr = err
			continue
		}
		if rec.ID != id {
			lastErr = fmt.Errorf("holds id %q", rec.ID)
			continue
		}
		return &rec, nil
	}
	return nil, fmt.Errorf("%w %s: %w", ErrCorrupt, p, lastErr)
}

// Delete removes the record of id; a missing record is not an error.
func (s *Store) Delete(id string) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting record: %w", err)
	}
	return nil
}

// RecordError is an unreadable record of a valid sandbox id (List): the
// sandbox may still be attached, so callers must not treat it as gone.
type RecordError struct {
	ID  string
	Err error
}

func (e *RecordError) Error() string { return e.Err.Error() }

// Unwrap makes errors.Is(err, ErrCorrupt) hold for a corrupt record.
func (e *RecordError) Unwrap() error { return e.Err }

// List returns every readable record, sorted by id, and one error per file
// that could not be read (each naming its path; a *RecordError when the
// file's name is a valid sandbox id). A bad file never hides the good ones.
func (s *Store) List() ([]*Record, []error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, []error{fmt.Errorf("listing state dir: %w", err)}
	}
	var recs []*Record
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, suffix) || strings.HasPrefix(name, ".") {
			continue
		}
		id := strings.TrimSuffix(name, suffix)
		rec, err := s.Get(id)
		if err != nil {
			if errors.Is(err, ErrBadID) {
				errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(s.dir, name), err))
				continue
			}
			errs = append(errs, &RecordError{ID: id, Err: err})
			continue
		}
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
	return recs, errs
}

// Modified returns when the record file of id was last written (also for
// an unreadable one).
func (s *Store) Modified(id string) (time.Time, error) {
	p, err := s.path(id)
	if err != nil {
		return time.Time{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return time.Time{}, fmt.Errorf("record of %s: %w", id, err)
	}
	return st.ModTime().UTC(), nil
}
