package main

import (
	"bufio"
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// microPackages are the hot-path packages whose benchmarks the doc tabulates.
var microPackages = []string{"./proxy/", "./proxy/dubbo/", "./keepalive/", "./xds/controlplane/"}

// runMicro runs the hot-path micro-benchmarks with go test and parses their lines. A package
// that fails to build or run is reported in Error; the rows that did run are kept.
func (s *Suite) runMicro(ctx context.Context) *MicroResult {
	args := append([]string{"test", "-run=NONE", "-bench=.", "-benchmem", "-benchtime=" + s.opt.MicroBenchtime}, microPackages...)
	res := &MicroResult{Command: "go " + strings.Join(args, " ")}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = s.root
	out, err := cmd.CombinedOutput()
	res.Rows = parseBench(string(out))
	if err != nil {
		res.Error = err.Error()
		for line := range strings.SplitSeq(string(out), "\n") {
			if strings.HasPrefix(line, "FAIL") || strings.Contains(line, "build failed") {
				res.Error += "; " + strings.TrimSpace(line)
			}
		}
	}
	s.logf("  micro: %d benchmarks%s", len(res.Rows), map[bool]string{true: ", error: " + res.Error, false: ""}[res.Error != ""])
	return res
}

var benchLineRe = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parseBench reads `go test -bench -benchmem` output: "pkg:" lines name the package of the
// Benchmark lines that follow.
func parseBench(out string) []MicroRow {
	var rows []MicroRow
	pkg := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimSpace(p), "github.com/stormgate/stormgate/")
			continue
		}
		m := benchLineRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		row := MicroRow{Package: pkg, Name: strings.TrimPrefix(m[1], "Benchmark")}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				row.NsOp = v
			case "B/op":
				row.BytesOp = v
			case "allocs/op":
				row.AllocsOp = v
			}
		}
		rows = append(rows, row)
	}
	return rows
}
