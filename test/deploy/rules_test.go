package deploy_test

// docs/architecture.md's rules, checked on the code: which of our
// packages each package may import, planning without I/O, no package
// above 30 % of the product's code, and no type whose methods spread over
// more than 5 files. The product is every non-test Go file outside test/.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/test/harness"
)

const module = "github.com/nri-cni/nri-cni/"

// allowedImports is what each package may import of ours: the layers of
// docs/architecture.md, each reaching only below (and beside, for the
// front ends). cmd/ wires everything and is not listed; a new package must
// be added here (and to the doc's table).
var allowedImports = map[string][]string{
	"hook/nri":                 {"attach", "cni", "config", "reconcile", "state"},
	"hook/oci":                 {"attach", "cni", "config"},
	"attach":                   {"plan", "cni", "netns", "netpol/ir", "state", "config", "deviceinfo"},
	"plan":                     {"cni", "config", "state", "nadpolicy", "apis/v1alpha1"},
	"reconcile":                {"attach", "cni", "config", "netns", "state", "loop"},
	"kube":                     {"plan", "attach", "cni", "config", "state", "nadpolicy", "migrate", "loop", "netpol/ir", "kube/dra", "kube/dradevice", "kube/podresources"},
	"kube/dra":                 {"plan", "cni", "config", "state", "loop", "hostroot"},
	"kube/dradevice":           {"deviceinfo", "hostroot"},
	"kube/podresources":        {"hostroot"},
	"kube/mnp":                 {"attach", "netpol", "netpol/ir", "apis/multinetpol/v1beta1"},
	"nadpolicy":                {"config"},
	"netpol":                   {"netpol/ir", "config"}, // config: OptionsFromConfig
	"netpol/ir":                nil,
	"netpol/eval":              {"netpol"},
	"migrate":                  {"plan", "cni", "config", "nadpolicy"},
	"nodeconf":                 {"deploy/node", "hostroot"},
	"apis/v1alpha1":            nil,
	"apis/multinetpol/v1beta1": nil,
	"loop":                     nil,
	"cni":                      {"hostroot"},
	"nft":                      {"netpol/ir", "netns"},
	"deviceinfo":               {"hostroot"},
	"hostroot":                 nil,
	"netns":                    nil, "state": nil, "config": nil, "metrics": nil, "deploy/node": nil,
	// Test fixtures that live beside their package.
	"attach/attachtest":                  {"attach", "cni", "config", "deviceinfo", "netns", "netpol/ir", "plan", "state", "test/testenv"},
	"kube/podresources/podresourcestest": nil,
	"kube/mnp/mnptest":                   {"apis/multinetpol/v1beta1"},
	"nadpolicy/policytest":               {"config"},
	"netpol/netpoltest":                  {"netpol"},
}

func TestPackagesImportOnlyTheLayersBelow(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = harness.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if strings.HasPrefix(pkg, "cmd/") || strings.HasPrefix(pkg, "test/") || pkg == "cni-recorder" {
			continue
		}
		allowed, listed := allowedImports[pkg]
		if !listed {
			t.Errorf("package %s is not in the layer table: add it to allowedImports and docs/architecture.md", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			ours, ok := strings.CutPrefix(imp, module)
			if ok && !slices.Contains(allowed, ours) {
				t.Errorf("%s imports %s: not a layer it may reach (allowed: %v)", pkg, ours, allowed)
			}
		}
	}
}

// ioImports are packages whose use is I/O; planning (plan, and netpol's
// rendering of MultiNetworkPolicy with its eval and netpoltest) reads
// memory only.
var ioImports = []string{"os", "os/exec", "io/ioutil", "io/fs", "net/http", "syscall", "golang.org/x/sys/unix",
	"github.com/containernetworking/cni/libcni", "github.com/vishvananda/netlink", "k8s.io/client-go"}

// ioCalls are net's functions that do I/O (net's parsers are pure).
var ioCalls = []string{"Dial", "DialTimeout", "Listen", "ListenPacket", "LookupHost", "LookupIP", "LookupAddr",
	"ResolveIPAddr", "ResolveTCPAddr", "ResolveUDPAddr", "Interfaces", "InterfaceByName", "InterfaceAddrs"}

func TestPlanningHasNoIO(t *testing.T) {
	// apis/v1alpha1 is planning's: the NetworkConfig it reads from memory.
	// netpol renders rules from a snapshot in memory, as plan plans.
	for _, f := range slices.Concat(productFiles(t, "plan"), productFiles(t, "apis/v1alpha1"), productFiles(t, "netpol"), productFiles(t, "netpol/ir")) {
		file := parse(t, f)
		for _, imp := range file.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			for _, bad := range ioImports {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s: planning does no I/O (docs/architecture.md)", f, path)
				}
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "net" && slices.Contains(ioCalls, sel.Sel.Name) {
				t.Errorf("%s calls net.%s: planning does no I/O", f, sel.Sel.Name)
			}
			return true
		})
	}
}

func TestNoPackageAboveThirtyPercent(t *testing.T) {
	lines := map[string]int{}
	total := 0
	for _, f := range productFiles(t, ".") {
		data, err := os.ReadFile(filepath.Join(harness.RepoRoot(), f))
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(string(data), "\n")
		lines[filepath.Dir(f)] += n
		total += n
	}
	for pkg, n := range lines {
		if share := float64(n) / float64(total); share > 0.30 {
			t.Errorf("package %s holds %.0f%% of the product's %d lines (at most 30%%): split it", pkg, 100*share, total)
		}
	}
}

func TestNoTypesMethodsInMoreThanFiveFiles(t *testing.T) {
	files := map[string]map[string]bool{}
	for _, f := range productFiles(t, ".") {
		for _, d := range parse(t, f).Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			if name := receiverType(fd.Recv.List[0].Type); name != "" {
				key := filepath.Dir(f) + "." + name
				if files[key] == nil {
					files[key] = map[string]bool{}
				}
				files[key][filepath.Base(f)] = true
			}
		}
	}
	var types []string
	for k := range files {
		types = append(types, k)
	}
	sort.Slice(types, func(i, j int) bool { return len(files[types[i]]) > len(files[types[j]]) })
	t.Logf("most files per type: %s %d, %s %d", types[0], len(files[types[0]]), types[1], len(files[types[1]]))
	for _, k := range types {
		if n := len(files[k]); n > 5 {
			t.Errorf("%s has methods in %d files (at most 5): %v", k, n, slices.Sorted(mapsKeys(files[k])))
		}
	}
}

func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// productFiles lists the non-test Go files under dir (relative to the
// repository root), outside test/ and hidden directories.
func productFiles(t *testing.T, dir string) []string {
	t.Helper()
	root := harness.RepoRoot()
	var out []string
	err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel == "test" || rel != "." && strings.HasPrefix(d.Name(), ".") || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func parse(t *testing.T, rel string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(harness.RepoRoot(), rel), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
