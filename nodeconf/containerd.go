package nodeconf

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// nriTable is the NRI plugin's table under [plugins] in containerd's config
// (the same name in config versions 2, 3 and 4).
const nriTable = "io.containerd.nri.v1.nri"

// How containerd 2.x reads its config, which checkContainerd follows (learnt
// from its cmd/containerd/server/config and its `config dump`):
//   - the main config is read only if it exists; without it containerd runs
//     on built-in defaults and reads no drop-in at all (the `imports` that
//     `containerd config default` prints take effect only from a file);
//   - then the files its `imports` name, breadth first: each entry is
//     cleaned, made relative to the importing file's directory unless
//     absolute, and globbed only if it contains '*' (matches in lexical
//     order; a non-glob entry that does not exist stops containerd);
//   - each file is read once; later files override earlier ones key by key,
//     inside plugin tables too (a table in an import does not replace the
//     main config's table: its other keys survive).

// containerdFile is one config file containerd reads.
type containerdFile struct {
	path string
	doc  map[string]any
}

func checkContainerd(fsys fs.FS, o Options, r *Report) {
	main := o.ContainerdConfig
	if main == "" {
		main = ContainerdConfig
	}
	main = path.Join("/", main)
	fix := fixCommand(RuntimeContainerd, o)
	if _, err := fs.Stat(fsys, rel(main)); errors.Is(err, fs.ErrNotExist) {
		r.NRIEnabled = true // containerd 2.x's default
		r.Findings = append(r.Findings, Finding{Files: []string{main}, Fix: fix,
			Problem: main + " is absent: containerd then runs on its built-in defaults, which import no drop-in " +
				"and leave NRI's default validator off"})
		return
	}
	files, dirs, err := loadContainerd(fsys, main)
	docs := make([]map[string]any, 0, len(files))
	for _, f := range files {
		r.Files = append(r.Files, f.path)
		docs = append(docs, f.doc)
	}
	r.Dirs = dirs
	if err != nil {
		r.Findings = append(r.Findings, Finding{Files: r.Files, Problem: err.Error() + " (containerd does not start with it)",
			Fix: "correct that file, then " + fix})
		return
	}
	disable, validator := setting{}, setting{}
	for _, f := range files {
		for _, e := range []error{
			disable.apply(f.doc, f.path, "plugins", nriTable, "disable"),
			validator.apply(f.doc, f.path, "plugins", nriTable, "default_validator", "enable"),
		} {
			if e != nil {
				r.Findings = append(r.Findings, Finding{Files: r.Files, Problem: e.Error(), Fix: "correct that key, then " + fix})
				return
			}
		}
	}
	r.NRIEnabled, r.ValidatorEnabled = !disable.value, validator.value
	if r.Socket = text(docs, "grpc", "address"); r.Socket == "" {
		r.Socket = ContainerdSocket
	}
	dropInRead := slices.Contains(r.Files, ContainerdDropIn)
	if disable.value {
		f := Finding{Files: r.Files, Fix: fix,
			Problem: fmt.Sprintf("NRI is off: %s sets disable = true in [plugins.%q]", disable.file, nriTable)}
		if dropInRead {
			f.Problem += ", after nri-cni's drop-in"
			f.Fix = "remove that key from " + disable.file + ", then restart containerd (systemctl restart containerd)"
		}
		r.Findings = append(r.Findings, f)
	}
	if !validator.value {
		r.Findings = append(r.Findings, validatorOff(fsys, r.Files, main, validator, dropInRead, fix))
	}
}

// validatorOff explains why containerd's default validator is off.
func validatorOff(fsys fs.FS, files []string, main string, v setting, dropInRead bool, fix string) Finding {
	table := fmt.Sprintf("[plugins.%q.default_validator]", nriTable)
	f := Finding{Files: files, Fix: fix}
	switch {
	case dropInRead && v.file != "" && v.file != ContainerdDropIn:
		f.Problem = fmt.Sprintf("NRI's default validator is off: %s sets enable = false in %s, after nri-cni's drop-in", v.file, table)
		f.Fix = "remove that key from " + v.file + ", then restart containerd (systemctl restart containerd)"
	case dropInRead:
		f.Problem = fmt.Sprintf("NRI's default validator is off: nri-cni's drop-in %s does not enable it (changed by hand?)", ContainerdDropIn)
	default:
		if _, err := fs.Stat(fsys, rel(ContainerdDropIn)); err == nil {
			f.Problem = fmt.Sprintf("NRI's default validator is off: nri-cni's drop-in %s is not read: "+
				"no `imports` of %s (or of a file it imports) covers it", ContainerdDropIn, main)
		} else {
			f.Problem = fmt.Sprintf("NRI's default validator is off: nri-cni's drop-in %s is absent", ContainerdDropIn)
		}
		if v.file != "" {
			f.Problem += fmt.Sprintf(", and %s sets enable = false in %s", v.file, table)
		}
	}
	return f
}

// loadContainerd reads main and the files it imports, in containerd's
// order, and lists the directories its globs read. It returns the files
// read so far with the first error, which names the file.
func loadContainerd(fsys fs.FS, main string) (out []containerdFile, dirs []string, err error) {
	seen := map[string]bool{}
	queue := []string{main}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		data, err := fs.ReadFile(fsys, rel(p))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return out, dirs, fmt.Errorf("%s: imported, but absent", p)
			}
			return out, dirs, fmt.Errorf("%s: %w", p, err)
		}
		var doc map[string]any
		if err := toml.Unmarshal(data, &doc); err != nil {
			return out, dirs, fmt.Errorf("%s: not valid TOML: %w", p, err)
		}
		seen[p] = true
		out = append(out, containerdFile{path: p, doc: doc})
		entries, err := Imports(doc, p)
		if err != nil {
			return out, dirs, err
		}
		for _, e := range entries {
			if !strings.Contains(e, "*") {
				queue = append(queue, e)
				continue
			}
			if d := path.Dir(e); !strings.Contains(d, "*") && !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
			matches, err := fs.Glob(fsys, rel(e))
			if err != nil {
				return out, dirs, fmt.Errorf("%s: imports %q: %w", p, e, err)
			}
			for _, m := range matches {
				queue = append(queue, "/"+m)
			}
		}
	}
	return out, dirs, nil
}

// Imports returns the `imports` of a containerd config file at host path
// file, resolved as containerd does: cleaned, relative entries joined to the
// file's directory. Globs are left as patterns.
func Imports(doc map[string]any, file string) ([]string, error) {
	v, ok := doc["imports"]
	if !ok {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: imports = %s is not a list of paths", file, tomlValue(v))
	}
	out := make([]string, 0, len(list))
	for _, item := range list {
		s, ok := item.(string)
		if !ok {
			return nil, fmt.Errorf("%s: imports: %v is not a path", file, item)
		}
		p := path.Clean(s)
		if !path.IsAbs(p) {
			p = path.Join(path.Dir(file), p)
		}
		out = append(out, p)
	}
	return out, nil
}

// covers reports whether an import entry (resolved by Imports) names target:
// equal, or a glob (an entry with '*') that matches it.
func covers(entry, target string) bool {
	if !strings.Contains(entry, "*") {
		return entry == target
	}
	ok, err := path.Match(entry, target)
	return err == nil && ok
}
