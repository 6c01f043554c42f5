package handover

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// OpenSelf opens this process's executable (/proc/self/exe: the inode that runs, even if
// its path has since been replaced or removed) without FD_CLOEXEC, for a rollback.
func OpenSelf() (int, error) {
	fd, err := unix.Open("/proc/self/exe", unix.O_RDONLY, 0)
	if err != nil {
		return -1, fmt.Errorf("handover: opening /proc/self/exe (the rollback target): %w", err)
	}
	return fd, nil
}

// KeepOnExec clears FD_CLOEXEC on every fd: they survive execve at the same numbers. One
// fcntl each: FD_CLOEXEC is the only descriptor flag, so there is nothing to read first (10,000
// consumers: this runs between the freeze and the exec).
func KeepOnExec(fds ...int) error {
	for _, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("handover: fd %d: %w", fd, err)
		}
	}
	return nil
}

// CloseOnExec sets FD_CLOEXEC on every fd (undoing KeepOnExec).
func CloseOnExec(fds ...int) {
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
}

// Exec replaces this process image (same PID) with the program at path, run with argv and
// env, and with exactly the descriptors keep (and 0, 1, 2) open in it: keep's FD_CLOEXEC is
// cleared, every other descriptor's set (libraries open some without it: netpoll's epoll
// and eventfd descriptors, which would otherwise pile up with each upgrade). It returns
// only if execve fails; keep's descriptors then have FD_CLOEXEC set again.
func Exec(path string, argv, env []string, keep []int) error {
	return execKeeping(path, argv, env, keep, true)
}

// execKeeping is Exec; with sweep false, descriptors not in keep are left as they are.
func execKeeping(path string, argv, env []string, keep []int, sweep bool) error {
	if sweep {
		if err := closeOthersOnExec(keep); err != nil {
			CloseOnExec(keep...)
			return err
		}
	}
	if err := KeepOnExec(keep...); err != nil {
		CloseOnExec(keep...)
		return err
	}
	err := syscall.Exec(path, argv, env)
	CloseOnExec(keep...)
	return fmt.Errorf("handover: execve %s: %w", path, err)
}

// closeOthersOnExec sets FD_CLOEXEC on every open descriptor above 2 that is not in keep
// (execKeeping then clears it on keep): one close_range(2) for all of them (Linux 5.11), else
// one fcntl per descriptor that /proc/self/fd lists.
func closeOthersOnExec(keep []int) error {
	if cloexecAbove2() == nil {
		return nil
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("handover: listing descriptors: %w", err)
	}
	sorted := slices.Clone(keep)
	slices.Sort(sorted)
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if _, found := slices.BinarySearch(sorted, fd); found {
			continue
		}
		unix.CloseOnExec(fd) // EBADF for ReadDir's own (closed) descriptor: nothing to do
	}
	return nil
}

// Env returns os.Environ() without the handover variables, plus extra ("K=V").
func Env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, EnvState+"=") || strings.HasPrefix(kv, EnvRollback+"=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// StateEnv is the EnvState entry for a state in memfd with the old executable at oldExe.
func StateEnv(memfd, oldExe int) string {
	return fmt.Sprintf("%s=%d:%d", EnvState, memfd, oldExe)
}

// RollBack execs the old binary again (from the descriptor the old image kept) with the
// same state and command line, telling it why (EnvRollback). For a new image that cannot
// restore: the old binary restores the state it wrote and serves on. Nothing of the state
// may have been used (no byte read or written on a handed-over socket) before this. It
// returns only if execve fails.
func (in *Incoming) RollBack(reason string) error {
	if in.OldExe < 0 || in.FD < 0 {
		return errors.New("handover: nothing to roll back to")
	}
	keep := []int{in.FD, in.OldExe}
	argv := slices.Clone(os.Args)
	// Without a decoded state its descriptors are unknown; this image has not touched them
	// (they still have FD_CLOEXEC cleared), so nothing else is closed on exec either.
	sweep := in.State != nil
	if in.State != nil {
		keep = append(keep, in.State.Header.FDs...)
		for _, fd := range in.State.Header.Listeners {
			keep = append(keep, fd)
		}
		if len(in.State.Header.Args) > 0 {
			argv[0] = in.State.Header.Args[0]
		}
	}
	reason = strings.ReplaceAll(reason, "\n", " ")
	env := Env(StateEnv(in.FD, in.OldExe), EnvRollback+"="+reason)
	return execKeeping("/proc/self/fd/"+strconv.Itoa(in.OldExe), argv, env, keep, sweep)
}

// cloexecAbove2 sets FD_CLOEXEC on every descriptor above 2 with one close_range(2); an error
// when the kernel has no CLOSE_RANGE_CLOEXEC (before 5.11).
func cloexecAbove2() error {
	return unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
}
