package handover

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Environment variables that cross the exec. They are read once at start and removed from
// the environment, so that no later child (a preflight) inherits them.
const (
	// EnvState is "MEMFD:OLDEXE": the descriptor of the memfd that holds the State and that
	// of the old executable (for a rollback, also when the state cannot be decoded).
	EnvState = "STORMGATE_UPGRADE_STATE"
	// EnvRollback, set by a new image that could not restore the state, tells the old
	// binary (exec'd again from its kept fd) why; it restores the same state.
	EnvRollback = "STORMGATE_UPGRADE_ROLLBACK"
)

// Format is the version of the State encoding this binary writes and reads. A binary reads
// exactly its own format: the preflight reports it, and the old process refuses a new binary
// whose format differs before anything is frozen.
const Format = 1

// magic opens every encoded State.
var magic = []byte("STORMGATE-HANDOVER\n")

// State is everything the old process image passes to the new one. The Header is JSON;
// the named sections are opaque bytes that each stage encodes and decodes itself (the
// settings store, admission, the proxy). File descriptors cross by number: FDs lists
// every one the state refers to, all with FD_CLOEXEC cleared before exec.
type State struct {
	Header   Header
	Sections map[string][]byte
}

// Header describes one handover.
type Header struct {
	Format int    `json:"format"`
	ID     string `json:"id"`     // of the upgrade (sidecar upgrade polls for it)
	From   string `json:"from"`   // version of the binary that wrote the state
	Binary string `json:"binary"` // the new binary, as asked
	// Trigger is what asked for the upgrade ("admin", "SIGUSR2").
	Trigger string `json:"trigger,omitempty"`
	// Args is the old process's command line (os.Args): the new image and a rollback run
	// with the same arguments.
	Args []string `json:"args"`
	// Listeners are the HTTP listening sockets by name ("metrics", "admin").
	Listeners map[string]int `json:"listeners,omitempty"`
	// FDs is every descriptor the state refers to, the memfd excepted.
	FDs []int `json:"fds"`
	// Started is when the handover began (wall clock; monotonic time does not cross exec);
	// Phases are the durations of the old process's phases (preflight, freeze, ...).
	Started time.Time                `json:"started"`
	Phases  map[string]time.Duration `json:"phases,omitempty"`
	// ExecAt is when the old image called execve (wall clock).
	ExecAt time.Time `json:"exec_at"`
	// Counts carries cumulative counters over (stormgate_upgrades_total by result).
	Counts map[string]uint64 `json:"counts,omitempty"`
	// Stats is what was handed over (consumers, upstream connections, pending), for the logs.
	Stats map[string]int `json:"stats,omitempty"`
}

// Encode writes s: magic, format, header length and JSON, then per section its name
// length, name, data length and data (big-endian uint32 lengths).
func (s *State) Encode(w io.Writer) error {
	s.Header.Format = Format
	h, err := json.Marshal(s.Header)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.Write(magic)
	put := func(v int) { _ = binary.Write(&b, binary.BigEndian, uint32(v)) }
	put(Format)
	put(len(h))
	b.Write(h)
	put(len(s.Sections))
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	for name, data := range s.Sections {
		b.Reset()
		put(len(name))
		b.WriteString(name)
		put(len(data))
		if _, err := w.Write(b.Bytes()); err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}

// maxSection bounds a section's length when decoding (a state is well below it).
const maxSection = 1 << 31

// Decode reads what Encode wrote, refusing another format.
func Decode(b []byte) (*State, error) {
	if !bytes.HasPrefix(b, magic) {
		return nil, errors.New("handover: not a handover state")
	}
	b = b[len(magic):]
	next := func() (int, error) {
		if len(b) < 4 {
			return 0, io.ErrUnexpectedEOF
		}
		v := binary.BigEndian.Uint32(b)
		b = b[4:]
		if v > maxSection {
			return 0, fmt.Errorf("length %d", v)
		}
		return int(v), nil
	}
	take := func(n int) ([]byte, error) {
		if len(b) < n {
			return nil, io.ErrUnexpectedEOF
		}
		out := b[:n:n]
		b = b[n:]
		return out, nil
	}
	format, err := next()
	if err != nil {
		return nil, fmt.Errorf("handover: state: %w", err)
	}
	if format != Format {
		return nil, fmt.Errorf("handover: state format %d; this binary reads format %d", format, Format)
	}
	s := &State{Sections: map[string][]byte{}}
	n, err := next()
	if err != nil {
		return nil, fmt.Errorf("handover: state header: %w", err)
	}
	h, err := take(n)
	if err != nil {
		return nil, fmt.Errorf("handover: state header: %w", err)
	}
	if err := json.Unmarshal(h, &s.Header); err != nil {
		return nil, fmt.Errorf("handover: state header: %w", err)
	}
	count, err := next()
	if err != nil {
		return nil, fmt.Errorf("handover: state: %w", err)
	}
	for range count {
		n, err := next()
		if err != nil {
			return nil, fmt.Errorf("handover: state section: %w", err)
		}
		name, err := take(n)
		if err != nil {
			return nil, fmt.Errorf("handover: state section: %w", err)
		}
		if n, err = next(); err != nil {
			return nil, fmt.Errorf("handover: state section %s: %w", name, err)
		}
		data, err := take(n)
		if err != nil {
			return nil, fmt.Errorf("handover: state section %s: %w", name, err)
		}
		s.Sections[string(name)] = data
	}
	return s, nil
}

// WriteMemfd encodes s into a new memfd without FD_CLOEXEC (it survives exec) and
// returns its descriptor, positioned at the start.
func WriteMemfd(s *State) (int, error) {
	fd, err := unix.MemfdCreate("stormgate-handover", 0)
	if err != nil {
		return -1, fmt.Errorf("handover: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "stormgate-handover")
	var buf bytes.Buffer
	if err := s.Encode(&buf); err != nil {
		f.Close()
		return -1, err
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return -1, fmt.Errorf("handover: writing the state: %w", err)
	}
	// A dup outlives the os.File (whose finalizer would close fd) and has no FD_CLOEXEC.
	nfd, err := unix.Dup(fd)
	f.Close()
	if err != nil {
		return -1, fmt.Errorf("handover: dup of the memfd: %w", err)
	}
	if _, err := unix.Seek(nfd, 0, io.SeekStart); err != nil {
		unix.Close(nfd)
		return -1, fmt.Errorf("handover: seek: %w", err)
	}
	return nfd, nil
}

// Incoming is a state this process image was started with.
type Incoming struct {
	State *State
	// FD is the memfd and OldExe the old executable (both kept open for a rollback until Done).
	FD, OldExe int
	// Rollback is non-empty when this image is the old binary started again because the
	// new one could not restore the state: why it could not.
	Rollback string
}

// FromEnv returns the state this image was exec'd with, or nil when it was started
// normally. It removes the variables from the environment either way.
func FromEnv() (*Incoming, error) {
	v, ok := os.LookupEnv(EnvState)
	rollback := os.Getenv(EnvRollback)
	os.Unsetenv(EnvState)
	os.Unsetenv(EnvRollback)
	if !ok {
		return nil, nil
	}
	a, b, _ := strings.Cut(v, ":")
	fd, err1 := strconv.Atoi(a)
	exe, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || fd < 3 || exe < 3 {
		return nil, fmt.Errorf("handover: %s=%q is not MEMFD:OLDEXE", EnvState, v)
	}
	in := &Incoming{FD: fd, OldExe: exe, Rollback: rollback}
	unix.CloseOnExec(fd) // a rollback clears them again
	unix.CloseOnExec(exe)
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return in, fmt.Errorf("handover: state fd %d: %w", fd, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return in, fmt.Errorf("handover: state fd %d: %w", fd, err)
	}
	buf := make([]byte, st.Size)
	if _, err := io.ReadFull(fdReader(fd), buf); err != nil {
		return in, fmt.Errorf("handover: reading the state: %w", err)
	}
	if in.State, err1 = Decode(buf); err1 != nil {
		return in, err1
	}
	// The handed-over descriptors crossed with FD_CLOEXEC cleared. In this image they must have it
	// again, or every child it starts (the next upgrade's preflight) would hold every consumer and
	// provider socket open while it runs. A rollback (RollBack) clears it again on those the state
	// names; before the state is decoded nothing is touched, so a rollback without it keeps them all.
	if cloexecAbove2() != nil {
		CloseOnExec(in.State.Header.FDs...)
		for _, lfd := range in.State.Header.Listeners {
			unix.CloseOnExec(lfd)
		}
	}
	return in, nil
}

// Done closes the memfd and the old executable's fd: this image serves now, there is
// nothing to roll back to.
func (in *Incoming) Done() {
	if in.FD >= 0 {
		unix.Close(in.FD)
		in.FD = -1
	}
	if in.OldExe >= 0 {
		unix.Close(in.OldExe)
		in.OldExe = -1
	}
}

// Since is how long ago the handover started (wall clock: it spans the exec).
func (h *Header) Since() time.Duration { return time.Since(h.Started) }

type fdReader int

func (r fdReader) Read(p []byte) (int, error) {
	n, err := unix.Read(int(r), p)
	if n == 0 && err == nil && len(p) > 0 {
		return 0, io.EOF
	}
	if n < 0 {
		n = 0
	}
	return n, err
}
