// Package state persists nri-cni's attachment records: one JSON file per
// sandbox (or hook-mode container) in the state directory, written atomically
// (temp file, fsync, rename, fsync of the directory) so a crash leaves either
// the old record or the new one, never half of one.
//
// File names come from the runtime's sandbox/container id, validated here;
// nothing pod-controlled (names, namespaces, annotations) reaches a path.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
	Name   string   `json:"name"`
	IfName string   `json:"ifname"`
	IPs    []string `json:"ips,omitempty"`
	Mac    string   `json:"mac,omitempty"`
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
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
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

// Runtimes use 64 hex chars; runc accepts [\w+-.]. Anything else is refused.
var idRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_+.-]{0,127}$`)

// ValidID reports whether id can name a record file.
func ValidID(id string) error {
	if !idRe.MatchString(id) || strings.Contains(id, "..") {
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

// Put writes rec atomically.
func (s *Store) Put(rec *Record) error {
	p, err := s.path(rec.ID)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding record %s: %w", rec.ID, err)
	}
	tmp, err := os.CreateTemp(s.dir, "."+rec.ID+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing record %s: %w", rec.ID, err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if err := writeSync(tmp, data); err != nil {
		return fmt.Errorf("writing record %s: %w", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("writing record %s: %w", p, err)
	}
	return syncDir(s.dir)
}

func writeSync(f *os.File, data []byte) error {
	if err := f.Chmod(fileMod); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
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
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrCorrupt, p, err)
	}
	if rec.ID != id {
		return nil, fmt.Errorf("%w %s: holds id %q", ErrCorrupt, p, rec.ID)
	}
	return &rec, nil
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

// List returns every readable record, sorted by id, and one error per file
// that could not be read (each naming its path). A bad file never hides the
// good ones.
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
		rec, err := s.Get(strings.TrimSuffix(name, suffix))
		if err != nil {
			if errors.Is(err, ErrBadID) {
				err = fmt.Errorf("%s: %w", filepath.Join(s.dir, name), err)
			}
			errs = append(errs, err)
			continue
		}
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
	return recs, errs
}
