package controllers_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoControllerImportsAnother keeps one job per package: a controller package may import the shared indexes
// (package index) but no other controller.
func TestNoControllerImportsAnother(t *testing.T) {
	const prefix = "github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/"
	dirs, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == "index" {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(d.Name(), "*.go"))
		for _, f := range files {
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if other, ok := strings.CutPrefix(path, prefix); ok && other != "index" && other != d.Name() {
					t.Errorf("%s imports controller %s: share through package index, or move the shared code out of internal/controller", f, other)
				}
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no controller package found")
	}
}
