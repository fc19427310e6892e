package nodeconf

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"

	"github.com/pelletier/go-toml/v2"

	"github.com/nri-cni/nri-cni/deploy/node"
)

// How CRI-O 1.36 reads its config, which checkCRIO follows (learnt from its
// pkg/config and `crio config`): crio.conf if it exists (its default path
// may be absent), then every file under crio.conf.d, subdirectories
// included, in lexical order; each file overrides the keys it sets and
// leaves the others. enable_nri defaults to true, the default validator to
// off. A file that is not valid TOML stops crio.

func checkCRIO(fsys fs.FS, o Options, r *Report) {
	main, dir := o.CRIOConfig, o.CRIODropInDir
	if main == "" {
		main = CRIOConfig
	}
	if dir == "" {
		dir = CRIODropInDir
	}
	main, dir = path.Join("/", main), path.Join("/", dir)
	dropIn := path.Join(dir, node.CRIODropInName)
	fix := fixCommand(RuntimeCRIO, o)

	files, err := crioFiles(fsys, main, dir)
	if err != nil {
		r.Findings = append(r.Findings, Finding{Files: append(files, dir), Problem: err.Error(), Fix: "correct it, then " + fix})
		return
	}
	r.Dirs = []string{dir}
	enable, validator := setting{value: true}, setting{}
	var docs []map[string]any
	for _, p := range files {
		data, err := fs.ReadFile(fsys, rel(p))
		if err != nil {
			r.Findings = append(r.Findings, Finding{Files: files, Problem: fmt.Sprintf("%s: %v", p, err), Fix: "correct it, then " + fix})
			return
		}
		var doc map[string]any
		if err := toml.Unmarshal(data, &doc); err != nil {
			r.Findings = append(r.Findings, Finding{Files: files,
				Problem: fmt.Sprintf("%s: not valid TOML (crio does not start with it): %v", p, err), Fix: "correct it, then " + fix})
			return
		}
		r.Files = append(r.Files, p)
		docs = append(docs, doc)
		for _, e := range []error{
			enable.apply(doc, p, "crio", "nri", "enable_nri"),
			validator.apply(doc, p, "crio", "nri", "default_validator", "nri_enable_default_validator"),
		} {
			if e != nil {
				r.Findings = append(r.Findings, Finding{Files: files, Problem: e.Error(), Fix: "correct that key, then " + fix})
				return
			}
		}
	}
	r.NRIEnabled, r.ValidatorEnabled = enable.value, validator.value
	if r.Socket = text(docs, "crio", "api", "listen"); r.Socket == "" {
		r.Socket = CRIOSocket
	}
	dropInRead := slices.Contains(files, dropIn)
	restart := ", then restart CRI-O (systemctl restart crio)"
	if !enable.value {
		f := Finding{Files: files, Fix: fix, Problem: fmt.Sprintf("NRI is off: %s sets enable_nri = false in [crio.nri]", enable.file)}
		if dropInRead {
			f.Problem += ", after nri-cni's drop-in"
			f.Fix = "remove that key from " + enable.file + restart
		}
		r.Findings = append(r.Findings, f)
	}
	if validator.value {
		return
	}
	f := Finding{Files: files, Fix: fix}
	switch {
	case dropInRead && validator.file != "" && validator.file != dropIn:
		f.Problem = fmt.Sprintf("NRI's default validator is off: %s sets nri_enable_default_validator = false "+
			"in [crio.nri.default_validator], after nri-cni's drop-in", validator.file)
		f.Fix = "remove that key from " + validator.file + restart
	case dropInRead:
		f.Problem = fmt.Sprintf("NRI's default validator is off: nri-cni's drop-in %s does not enable it (changed by hand?)", dropIn)
	default:
		f.Problem = fmt.Sprintf("NRI's default validator is off: nri-cni's drop-in %s is absent", dropIn)
		if validator.file != "" {
			f.Problem += fmt.Sprintf(", and %s sets nri_enable_default_validator = false", validator.file)
		}
	}
	r.Findings = append(r.Findings, f)
}

// crioFiles lists the files CRI-O reads, in its order: main if present, then
// every non-directory under dir (lexical, depth first).
func crioFiles(fsys fs.FS, main, dir string) ([]string, error) {
	var files []string
	if _, err := fs.Stat(fsys, rel(main)); err == nil {
		files = append(files, main)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", main, err)
	}
	err := fs.WalkDir(fsys, rel(dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == rel(dir) && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return fmt.Errorf("%s: %w", "/"+p, err)
		}
		if !d.IsDir() {
			files = append(files, "/"+p)
		}
		return nil
	})
	return files, err
}
