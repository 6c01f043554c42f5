package handover

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestStateRoundTrip(t *testing.T) {
	in := &State{
		Header: Header{ID: "abc", From: "v1", Binary: "/bin/new", Args: []string{"sidecar", "run"},
			Listeners: map[string]int{"admin": 7}, FDs: []int{8, 9}, Started: time.Now().Round(0),
			Phases: map[string]time.Duration{"freeze": time.Millisecond}, Counts: map[string]uint64{"success": 3}},
		Sections: map[string][]byte{"proxy": bytes.Repeat([]byte{0, 1, 2}, 1000), "empty": {}},
	}
	var b bytes.Buffer
	if err := in.Encode(&b); err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if out.Header.ID != "abc" || out.Header.Listeners["admin"] != 7 || !out.Header.Started.Equal(in.Header.Started) ||
		out.Header.Counts["success"] != 3 || out.Header.Format != Format {
		t.Fatalf("header %+v", out.Header)
	}
	if !bytes.Equal(out.Sections["proxy"], in.Sections["proxy"]) || len(out.Sections["empty"]) != 0 || len(out.Sections) != 2 {
		t.Fatalf("sections %d", len(out.Sections))
	}
	// Every truncation is refused, never misread.
	for n := range b.Len() {
		if _, err := Decode(b.Bytes()[:n]); err == nil {
			t.Fatalf("a state cut at %d of %d bytes decoded", n, b.Len())
		}
	}
	other := bytes.Clone(b.Bytes())
	other[len(magic)+3] = Format + 1
	if _, err := Decode(other); err == nil || !strings.Contains(err.Error(), "format") {
		t.Fatalf("another format: %v", err)
	}
}

// The memfd round trip as the new image sees it: FromEnv reads the state, removes the
// variables (a later child must not inherit them) and keeps the descriptors for RollBack.
func TestMemfdFromEnv(t *testing.T) {
	fd, err := WriteMemfd(&State{Header: Header{ID: "x"}, Sections: map[string][]byte{"a": []byte("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC != 0 {
		t.Fatal("the memfd has FD_CLOEXEC: it would not survive the exec")
	}
	exe, err := OpenSelf()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvState, fmt.Sprintf("%d:%d", fd, exe))
	t.Setenv(EnvRollback, "why")
	in, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Done()
	if in.State.Header.ID != "x" || string(in.State.Sections["a"]) != "hello" || in.Rollback != "why" {
		t.Fatalf("incoming %+v", in)
	}
	if _, ok := os.LookupEnv(EnvState); ok {
		t.Error("EnvState still set")
	}
	if _, ok := os.LookupEnv(EnvRollback); ok {
		t.Error("EnvRollback still set")
	}
	if none, err := FromEnv(); none != nil || err != nil {
		t.Errorf("second FromEnv: %v, %v", none, err)
	}
	t.Setenv(EnvState, "7")
	if _, err := FromEnv(); err == nil {
		t.Error("a malformed EnvState was accepted")
	}
}

// TestExecKeepsExactlyTheListedFDs execs for real: a child process (this test binary)
// opens two pipes, then Exec()s this test binary again keeping only one; the new image
// reports which of them it has.
func TestExecKeepsExactlyTheListedFDs(t *testing.T) {
	switch os.Getenv("HANDOVER_TEST_MODE") {
	case "exec":
		var kept, dropped [2]int
		if err := unix.Pipe2(kept[:], unix.O_CLOEXEC); err != nil {
			panic(err)
		}
		if err := unix.Pipe(dropped[:]); err != nil { // no FD_CLOEXEC: Exec must close it anyway
			panic(err)
		}
		env := reportEnv("HANDOVER_TEST_FDS=" + strconv.Itoa(kept[0]) + "," + strconv.Itoa(dropped[0]))
		err := Exec(os.Args[0], []string{os.Args[0], "-test.run=TestExecKeepsExactlyTheListedFDs"}, env, []int{kept[0]})
		fmt.Println("exec failed:", err)
		os.Exit(3)
	case "report":
		fds := strings.Split(os.Getenv("HANDOVER_TEST_FDS"), ",")
		for i, s := range fds {
			fd, _ := strconv.Atoi(s)
			_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			fmt.Printf("fd%d open=%t\n", i, err == nil)
		}
		os.Exit(0)
	}
	out := runExecChild(t, "TestExecKeepsExactlyTheListedFDs")
	if !strings.Contains(out, "fd0 open=true") || !strings.Contains(out, "fd1 open=false") {
		t.Fatalf("after exec, want the kept fd open and the other closed; got:\n%s", out)
	}
}

// TestIncomingDescriptorsCloseOnExecAgain: the descriptors a handover carried across exec (FD_CLOEXEC
// cleared for it) have FD_CLOEXEC again in the new image once FromEnv has read the state, so a child the
// new image starts later (the next upgrade's preflight) does not hold every consumer socket open.
func TestIncomingDescriptorsCloseOnExecAgain(t *testing.T) {
	switch os.Getenv("HANDOVER_TEST_MODE") {
	case "exec":
		var sock [2]int
		if err := unix.Pipe2(sock[:], unix.O_CLOEXEC); err != nil {
			panic(err)
		}
		memfd, err := WriteMemfd(&State{Header: Header{ID: "x", FDs: []int{sock[0]}}})
		if err != nil {
			panic(err)
		}
		exe, err := OpenSelf()
		if err != nil {
			panic(err)
		}
		env := reportEnv(StateEnv(memfd, exe), "HANDOVER_TEST_FDS="+strconv.Itoa(sock[0]))
		err = Exec(os.Args[0], []string{os.Args[0], "-test.run=TestIncomingDescriptorsCloseOnExecAgain"}, env,
			[]int{sock[0], memfd, exe})
		fmt.Println("exec failed:", err)
		os.Exit(3)
	case "report":
		fd, _ := strconv.Atoi(os.Getenv("HANDOVER_TEST_FDS"))
		before, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		in, err := FromEnv()
		if err != nil {
			fmt.Println("FromEnv:", err)
			os.Exit(4)
		}
		in.Done()
		after, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		fmt.Printf("crossed open=%t cloexec before=%t after=%t\n", err == nil, before&unix.FD_CLOEXEC != 0,
			after&unix.FD_CLOEXEC != 0)
		os.Exit(0)
	}
	out := runExecChild(t, "TestIncomingDescriptorsCloseOnExecAgain")
	if !strings.Contains(out, "crossed open=true cloexec before=false after=true") {
		t.Fatalf("want the crossed descriptor open, without FD_CLOEXEC across the exec and with it after "+
			"FromEnv; got:\n%s", out)
	}
}

// runExecChild runs this test binary's test in its "exec" mode (HANDOVER_TEST_MODE), which execs into
// its "report" mode; the output of both.
func runExecChild(t *testing.T, test string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+test)
	cmd.Env = append(os.Environ(), "HANDOVER_TEST_MODE=exec")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return string(out)
}

// reportEnv is the environment of the "report" image: Env(extra...) in that mode.
func reportEnv(extra ...string) []string {
	var env []string
	for _, kv := range Env(extra...) {
		if !strings.HasPrefix(kv, "HANDOVER_TEST_MODE=") {
			env = append(env, kv)
		}
	}
	return append(env, "HANDOVER_TEST_MODE=report")
}

// script writes an executable shell script.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPreflight(t *testing.T) {
	ctx := context.Background()
	ok := fmt.Sprintf(`echo '{"preflight":"ok","version":"v9","handover_format":%d}'`, Format)
	rep, err := Preflight(ctx, script(t, `read line; [ "$line" = settings ] && [ "$3" = --preflight ] || exit 9`+"\n"+ok),
		[]string{"run", "--x", PreflightFlag}, []byte("settings\n"), 5*time.Second)
	if err != nil || rep.Version != "v9" {
		t.Fatalf("a passing binary: %+v, %v", rep, err)
	}
	for name, c := range map[string]struct{ body, want string }{
		"exits 1":      {"echo 'bad flag --x' >&2; exit 1", "bad flag --x"},
		"no report":    {"echo hello", "without a preflight report"},
		"other format": {`echo '{"preflight":"ok","version":"v9","handover_format":99}'`, "format 99"},
		"hangs":        {"sleep 30 & sleep 30", "did not finish"},
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := Preflight(ctx, script(t, c.body), []string{PreflightFlag}, nil, 500*time.Millisecond)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v; want it to say %q", err, c.want)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("took %v", time.Since(start))
			}
		})
	}
	notExec := filepath.Join(t.TempDir(), "plain")
	os.WriteFile(notExec, []byte("x"), 0o644)
	if _, err := Preflight(ctx, notExec, nil, nil, time.Second); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Errorf("non-executable: %v", err)
	}
	if _, err := Preflight(ctx, "/nonexistent/sidecar", nil, nil, time.Second); err == nil {
		t.Error("missing binary accepted")
	}
}
