package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/design.md's "Map of the code" names files and directories in call order; every one must
// exist, so that a rename or a move updates the map.
func TestDesignMapNamesFilesThatExist(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Map of the code\n")
	if !ok {
		t.Fatal(`docs/design.md has no "## Map of the code" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	paths := regexp.MustCompile("`([a-z0-9_]+/[a-z0-9_/]*(?:\\.go)?)`").FindAllStringSubmatch(section, -1)
	if len(paths) < 30 {
		t.Fatalf("the map names %d files, want it to follow a request file by file (30 or more)", len(paths))
	}
	for _, m := range paths {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("docs/design.md, Map of the code: %s: %v", m[1], err)
		}
	}
}
