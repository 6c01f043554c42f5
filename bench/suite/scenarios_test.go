package main

import (
	"os"
	"strings"
	"testing"
)

// TestScenarioTable: names are unique, every scenario runs something, and bench/README.md's
// list of what --scenarios takes is the table's.
func TestScenarioTable(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range scenarios {
		if seen[sc.name] || sc.run == nil {
			t.Errorf("scenario %q: duplicate name or no run", sc.name)
		}
		seen[sc.name] = true
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "a subset of: " + strings.Join(allScenarios, ", ") + "\n"; !strings.Contains(string(readme), want) {
		t.Errorf("bench/README.md does not list the scenarios as %q", want)
	}
	if _, err := selectScenarios([]string{"idle", "nosuch"}); err == nil {
		t.Error("an unknown scenario was accepted")
	}
}
