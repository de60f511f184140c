package docs

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/idemctl/idemctl/"

// layers reads the layer table of architecture.md: package → layer.
func layers(t *testing.T) map[string]int {
	t.Helper()
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| ([0-9]+) \\|[^|]*\\|(.*)\\|$")
	pkg := regexp.MustCompile("`([^`]+)`")
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		for _, p := range pkg.FindAllStringSubmatch(m[2], -1) {
			if prev, dup := out[p[1]]; dup {
				t.Errorf("architecture.md places %s in layers %d and %d", p[1], prev, n)
			}
			out[p[1]] = n
		}
	}
	if len(out) == 0 {
		t.Fatal("architecture.md has no layer table")
	}
	return out
}

// packages lists the module's packages with their non-test imports of the
// module's own packages, as `go list` sees them.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = ".."
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line)
		name := strings.TrimPrefix(f[0], module)
		out[name] = nil
		for _, imp := range f[1:] {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				out[name] = append(out[name], rest)
			}
		}
	}
	return out
}

// TestLayers: every package is placed in architecture.md's table, and no
// package imports one of a higher layer.
func TestLayers(t *testing.T) {
	layer := layers(t)
	pkgs := packages(t)
	for p, imports := range pkgs {
		l, ok := layer[p]
		if !ok {
			t.Errorf("%s is in no layer of docs/architecture.md", p)
			continue
		}
		for _, imp := range imports {
			if li, ok := layer[imp]; ok && li > l {
				t.Errorf("%s (layer %d) imports %s (layer %d): an import may not go up a layer", p, l, imp, li)
			}
		}
	}
	for p := range layer {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("docs/architecture.md names %s, which is not a package", p)
		}
	}
}

// TestReadmeLayout: the README's layout names every package.
func TestReadmeLayout(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "## Layout")
	if !ok {
		t.Fatal("README.md has no Layout section")
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(after, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			listed[strings.TrimSuffix(f[0], "/")] = true
		}
		if strings.HasPrefix(line, "## ") {
			break
		}
	}
	for p := range packages(t) {
		if !listed[p] {
			t.Errorf("README.md's layout does not list %s", p)
		}
	}
}
