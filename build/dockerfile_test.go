package build

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/build/image"
)

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct {
	line int
	op   string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	start, n := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") { // comment inside a continued instruction
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{start, strings.ToUpper(op), strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stages groups instructions by FROM; the key is the stage name (or the image when unnamed).
func stages(ins []instruction) (names []string, by map[string][]instruction) {
	by = map[string][]instruction{}
	var cur string
	for _, in := range ins {
		if in.op == "FROM" {
			f := strings.Fields(in.args)
			cur = f[0]
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				cur = f[2]
			}
			names = append(names, cur)
		}
		by[cur] = append(by[cur], in)
	}
	return names, by
}

func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, filepath.Join("..", "Dockerfile"))
	names, by := stages(ins)
	if len(names) < 2 {
		t.Fatalf("stages %v: want a multi-stage build", names)
	}

	build := by["build"]
	if len(build) == 0 || !strings.HasPrefix(build[0].args, "golang:1.26 ") {
		t.Fatalf("no build stage FROM golang:1.26 AS build")
	}
	var runs []string
	hasArg := false
	for _, in := range build {
		switch in.op {
		case "RUN":
			runs = append(runs, strings.ReplaceAll(in.args, "${VERSION}", "$VERSION"))
		case "ARG":
			hasArg = hasArg || strings.HasPrefix(in.args, "VERSION")
		}
	}
	checkReplacesCopied(t, build)
	gobuild := makeBuildCommand(t)
	for _, want := range []string{gobuild + " -o /out/sidecar ./cmd/sidecar", gobuild + " -tags dataplane -o /out/sidecar-dataplane ./cmd/sidecar"} {
		if !slices.Contains(runs, want) {
			t.Fatalf("build stage RUN lines %q lack the Makefile's command:\n  %s", runs, want)
		}
	}
	if strings.Contains(gobuild, "$VERSION") && !hasArg {
		t.Error("build stage uses $VERSION but declares no ARG VERSION")
	}

	// The image stages are the images build/image describes (what `make image` builds without
	// Docker), instruction for instruction: control with the full binary, and last (docker build's
	// default target) the sidecar image with the data-plane build, both containers of an injected pod.
	// Both build on the image stage, which holds what they share.
	if !slices.Equal(names, []string{"build", "image", "control", "sidecar"}) {
		t.Errorf("stages %v: want build, image, control and sidecar (one image is both init container and sidecar)", names)
	}
	checkImageStage(t, by["image"], by["control"], "control", "/out/sidecar")
	checkImageStage(t, by["image"], by["sidecar"], "sidecar", "/out/sidecar-dataplane")

	ignore, err := os.ReadFile(filepath.Join("..", ".dockerignore"))
	if err != nil || !bytes.Contains(ignore, []byte(".git\n")) {
		t.Errorf(".dockerignore missing or not excluding .git (%v)", err)
	}
}

// checkReplacesCopied: every directory go.mod replaces a module with (third_party/netpoll) has its
// go.mod copied into the build stage before `go mod download`, which needs the whole module graph, and
// is not left out of the build context by .dockerignore.
func checkReplacesCopied(t *testing.T, build []instruction) {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	ignore, err := os.ReadFile(filepath.Join("..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^replace \S+ => (\./\S+)$`).FindAllSubmatch(mod, -1) {
		dir := strings.TrimPrefix(string(m[1]), "./")
		copied := false
		for _, in := range build {
			if in.op == "COPY" && slices.Contains(strings.Fields(in.args), dir+"/go.mod") {
				copied = true
			}
			if in.op == "RUN" && strings.Contains(in.args, "go mod download") && !copied {
				t.Errorf("build stage runs go mod download before copying %s/go.mod (go.mod replaces a module with %s)", dir, dir)
			}
		}
		for line := range strings.Lines(string(ignore)) {
			if p := strings.TrimSuffix(strings.TrimSpace(line), "/"); p != "" && strings.HasPrefix(dir+"/", p+"/") {
				t.Errorf(".dockerignore's %q leaves %s out of the build context", p, dir)
			}
		}
	}
}

// makeBuildCommand returns the Makefile's GOBUILD with $(GO) as go and $(VERSION) as $VERSION, after
// checking that `make build` builds the sidecar with it.
func makeBuildCommand(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatalf("the build command lives in the Makefile: %v", err)
	}
	var cmd string
	for line := range strings.Lines(string(mk)) {
		name, val, ok := strings.Cut(line, "=")
		name = strings.TrimRight(strings.TrimSpace(name), ":?")
		if ok && strings.TrimSpace(name) == "GOBUILD" {
			cmd = strings.Join(strings.Fields(val), " ")
		}
	}
	if cmd == "" {
		t.Fatal("Makefile defines no GOBUILD")
	}
	for _, line := range []string{"$(GOBUILD) -o bin/sidecar ./cmd/sidecar", "$(GOBUILD) -tags dataplane -o bin/sidecar-dataplane ./cmd/sidecar"} {
		if !strings.Contains(string(mk), line) {
			t.Fatalf("Makefile's build target does not run %s", line)
		}
	}
	return strings.NewReplacer("$(GO)", "go", "$(VERSION)", "$VERSION").Replace(cmd)
}

// splitCommand splits a shell command line of words, double-quoted words and leading VAR=value
// assignments (all GoBuildCommand uses).
func splitCommand(cmd string) (env, argv []string, err error) {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, c := range cmd {
		switch {
		case c == '"':
			quoted, inWord = !quoted, true
		case c == ' ' && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune(`'\$`+"`", c):
			return nil, nil, fmt.Errorf("unsupported shell syntax %q in %q", c, cmd)
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if quoted {
		return nil, nil, fmt.Errorf("unterminated quote in %q", cmd)
	}
	if inWord {
		words = append(words, cur.String())
	}
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		env, words = append(env, words[0]), words[1:]
	}
	return env, words, nil
}

func TestSplitCommand(t *testing.T) {
	env, argv, err := splitCommand(`CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=1" -o /out/sidecar ./cmd/sidecar`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(env, []string{"CGO_ENABLED=0"}) ||
		!slices.Equal(argv, []string{"go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=1", "-o", "/out/sidecar", "./cmd/sidecar"}) {
		t.Fatalf("env %q argv %q", env, argv)
	}
	if _, _, err := splitCommand(`go build "x`); err == nil {
		t.Fatal("unterminated quote accepted")
	}
}

// TestStaticBinary runs the Makefile's (and so the Dockerfile's) build command, output redirected to a
// temporary directory, and checks that the result is a static executable: no PT_INTERP, no PT_DYNAMIC,
// no .dynamic section, cgo off, stripped, and stamped with the version.
func TestStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: builds the whole sidecar")
	}
	const version = "static-test"
	command := strings.ReplaceAll(makeBuildCommand(t), "$VERSION", version) + " -o /out/sidecar ./cmd/sidecar"
	env, argv, err := splitCommand(command)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sidecar")
	i := slices.Index(argv, "-o")
	if i < 0 || i+1 >= len(argv) {
		t.Fatalf("no -o in %q", argv)
	}
	argv[i+1] = out
	// A cold build of the whole sidecar takes minutes on a busy 2-core machine; `make build` uses the
	// same flags, so after it the build cache makes this fast. Stop before the test binary's own timeout
	// so the failure says what happened.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	if dl, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), dl.Add(-10*time.Second))
	}
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v (context: %v)\n%s", command, err, ctx.Err(), b)
	}

	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		t.Errorf("ELF type %v, want ET_EXEC (a PIE would need a loader)", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %v present: the binary is dynamically linked", p.Type)
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Error(".dynamic section present")
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("imports shared libraries %v", libs)
	}
	if f.Section(".symtab") != nil {
		t.Error(".symtab present: -ldflags -s was not applied")
	}

	info, err := buildinfo.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// -ldflags is not recorded under -trimpath; the missing .symtab above and the version below show it.
	for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[k] != want {
			t.Errorf("build setting %s = %q, want %q", k, settings[k], want)
		}
	}
	if b, err := os.ReadFile(out); err != nil {
		t.Error(err)
	} else if err := image.CheckStatic(b); err != nil {
		t.Errorf("build/image refuses the Makefile's binary: %v", err)
	}
	if b, err := exec.Command(out, "version").CombinedOutput(); err != nil || !strings.Contains(string(b), version) {
		t.Errorf("%s version: %v: %q, want it to name %q", out, err, b, version)
	}
	if st, err := os.Stat(out); err == nil {
		t.Logf("static sidecar binary: %.1f MiB", float64(st.Size())/(1<<20))
	}
}

var labelPair = regexp.MustCompile(`([A-Za-z0-9._-]+)="([^"]*)"`)

// checkImageStage compares an image stage of the Dockerfile, on top of the shared base stage, with
// image.Sidecar: from scratch, the binary built at from and nothing else, the same user,
// entrypoint, ports and labels.
func checkImageStage(t *testing.T, base, stage []instruction, name, from string) {
	t.Helper()
	spec := image.Sidecar(nil, "", "${VERSION}", "", time.Time{})
	if len(base) == 0 || len(stage) == 0 {
		t.Errorf("no image or %s stage", name)
		return
	}
	if got := base[0].args; got != "scratch AS image" {
		t.Errorf("image stage FROM %s: want scratch (the image holds the static binary only)", got)
	}
	if got := stage[0].args; got != "image AS "+name {
		t.Errorf("%s stage FROM %s: want image AS %s", name, got, name)
	}
	final := append(slices.Clone(base), stage[1:]...)
	var copies, ports []string
	var user, entry string
	labels := map[string]string{}
	for _, in := range final[1:] {
		switch in.op {
		case "COPY":
			copies = append(copies, in.args)
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entry = in.args
		case "EXPOSE":
			ports = append(ports, strings.Fields(in.args)...)
		case "LABEL":
			for _, m := range labelPair.FindAllStringSubmatch(in.args, -1) {
				labels[m[1]] = m[2]
			}
		case "ARG":
		default:
			t.Errorf("line %d: %s in the %s stage: build/image does not do that, so the two images would differ", in.line, in.op, name)
		}
	}
	if want := []string{"--from=build " + from + " " + spec.BinaryPath}; !slices.Equal(copies, want) {
		t.Errorf("%s stage COPY %q, want exactly %q", name, copies, want)
	}
	if user != spec.User {
		t.Errorf("%s stage USER %q, build/image %q", name, user, spec.User)
	}
	if want, _ := json.Marshal([]string{spec.BinaryPath}); entry != string(want) {
		t.Errorf("%s stage ENTRYPOINT %s, want %s", name, entry, want)
	}
	if !slices.Equal(ports, spec.Ports) {
		t.Errorf("%s stage EXPOSE %q, build/image %q", name, ports, spec.Ports)
	}
	if !maps.Equal(labels, spec.Labels) {
		t.Errorf("%s stage LABEL %q, build/image %q", name, labels, spec.Labels)
	}
}
