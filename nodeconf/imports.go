package nodeconf

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"strconv"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// MinimalContainerdConfig is the main config node-setup writes where there
// is none: it only imports nri-cni's drop-in (that file, not a glob: a
// stray file in the drop-in directory stays inactive), so everything else
// keeps containerd's built-in defaults (`containerd config dump` of this
// file and of no file differ in nothing but the drop-in read and the
// imports list). Version 3 is the newest every containerd with the default
// validator (2.2+) reads as is.
func MinimalContainerdConfig() []byte {
	return []byte(`# containerd's main config, written by ` + "`nri-cni node-setup`" + ` because there was none:
# containerd reads drop-ins only through a config file's imports. Everything
# else keeps containerd's built-in defaults.
version = 3
imports = [` + strconv.Quote(ContainerdDropIn) + `]
`)
}

// EnsureImport makes the containerd main config data (at host path file)
// import dropIn, editing the text so that every other byte is kept:
//   - an `imports` entry already covers dropIn: data is returned unchanged
//     and change is "";
//   - `imports` exists: dropIn is appended to it;
//   - there is no `imports`: `imports = ["<dropIn>"]` is added as a
//     top-level key, after the last top-level key (top-level keys must come
//     before the first table), or first in the file if there is none. The
//     file itself, not a glob of its directory: a glob would also activate
//     every other file there, strays and backups included.
//
// The result is decoded again and must equal the original plus that one
// change; if not, or if data is not valid TOML, the error names the file and
// what to add by hand.
func EnsureImport(data []byte, file, dropIn string) (out []byte, change string, err error) {
	var before map[string]any
	if err := toml.Unmarshal(data, &before); err != nil {
		return nil, "", fmt.Errorf("%s: not valid TOML: %w", file, err)
	}
	entries, err := Imports(before, file)
	if err != nil {
		return nil, "", err
	}
	for _, e := range entries {
		if covers(e, dropIn) {
			return data, "", nil
		}
	}
	pos, err := scanTopLevel(data, file)
	if err != nil {
		return nil, "", err
	}
	want := maps.Clone(before)
	if want == nil {
		want = map[string]any{}
	}
	var insert string
	var at int
	if pos.imports {
		list, _ := before["imports"].([]any)
		want["imports"] = append(append([]any{}, list...), dropIn)
		if pos.lastElemEnd >= 0 {
			at, insert = pos.lastElemEnd, ", "+strconv.Quote(dropIn)
		} else {
			at, insert = pos.arrayClose, strconv.Quote(dropIn)
		}
		change = fmt.Sprintf("appended %q to imports", dropIn)
	} else {
		want["imports"] = []any{dropIn}
		eol := "\n"
		if bytes.Contains(data, []byte("\r\n")) {
			eol = "\r\n"
		}
		line := "imports = [" + strconv.Quote(dropIn) + "] # added by nri-cni node-setup" + eol
		switch {
		case pos.lastTopEnd < 0:
			at, insert = 0, line
		case bytes.IndexByte(data[pos.lastTopEnd:], '\n') < 0:
			at, insert = len(data), eol+line
		default:
			at, insert = pos.lastTopEnd+bytes.IndexByte(data[pos.lastTopEnd:], '\n')+1, line
		}
		change = fmt.Sprintf("added imports = [%q] as a top-level key", dropIn)
	}
	out = make([]byte, 0, len(data)+len(insert))
	out = append(append(append(out, data[:at]...), insert...), data[at:]...)
	var after map[string]any
	if err := toml.Unmarshal(out, &after); err != nil || !reflect.DeepEqual(after, want) {
		return nil, "", fmt.Errorf("%s: cannot add the import safely; add %q to its top-level imports (before any [table]) yourself",
			file, dropIn)
	}
	return out, change, nil
}

// topLevel is where EnsureImport may edit: byte offsets in the file.
type topLevel struct {
	lastTopEnd  int  // end of the last top-level key/value (-1: none)
	imports     bool // a top-level imports array exists
	arrayClose  int  // offset of its closing ']'
	lastElemEnd int  // end of its last element (-1: empty)
}

// scanTopLevel finds the top-level keys (those before the first table) and
// the imports array's offsets.
func scanTopLevel(data []byte, file string) (topLevel, error) {
	pos := topLevel{lastTopEnd: -1, lastElemEnd: -1}
	var p unstable.Parser
	p.Reset(data)
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind == unstable.Table || e.Kind == unstable.ArrayTable {
			break
		}
		if e.Kind != unstable.KeyValue {
			continue
		}
		end := int(e.Raw.Offset + e.Raw.Length)
		pos.lastTopEnd = end
		var key []string
		for it := e.Key(); it.Next(); {
			key = append(key, string(it.Node().Data))
		}
		if len(key) != 1 || key[0] != "imports" {
			continue
		}
		v := e.Value()
		if v.Kind != unstable.Array || end < 1 || data[end-1] != ']' {
			return pos, fmt.Errorf("%s: imports is not a list of paths", file)
		}
		pos.imports, pos.arrayClose = true, end-1
		for it := v.Children(); it.Next(); {
			if n := it.Node(); n.Kind != unstable.Comment {
				pos.lastElemEnd = int(n.Raw.Offset + n.Raw.Length)
			}
		}
	}
	if err := p.Error(); err != nil {
		return pos, fmt.Errorf("%s: not valid TOML: %w", file, err)
	}
	return pos, nil
}
