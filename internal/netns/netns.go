package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Namespace is a named network namespace.
type Namespace struct {
	// Name is the name under /run/netns.
	Name string
}

// Create adds the namespace name (`ip netns add`) and brings its loopback up. The caller
// removes it (Remove).
func Create(ctx context.Context, name string) (*Namespace, error) {
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
	}
	n := &Namespace{Name: name}
	if _, err := n.Exec(ctx, "ip", "link", "set", "lo", "up"); err != nil {
		_ = n.Remove()
		return nil, err
	}
	return n, nil
}

// Remove deletes the namespace; its interfaces go with it, its sockets with their processes.
func (n *Namespace) Remove() error {
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", n.Name, err, out)
	}
	return nil
}

// Command returns `ip netns exec <name> argv...`, ready to start (ip execs argv: same pid).
func (n *Namespace) Command(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name}, argv...)...)
}

// Exec runs argv inside the namespace and returns its standard output; the error carries its
// standard error.
func (n *Namespace) Exec(ctx context.Context, argv ...string) (string, error) {
	cmd := n.Command(ctx, argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("in netns %s: %s: %v: %s", n.Name, strings.Join(argv, " "), err, stderr.String())
	}
	return string(out), nil
}

// Do runs fn on an OS thread switched into the namespace and returns fn's error. Sockets fn
// creates belong to the namespace for their whole life.
func (n *Namespace) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: when this goroutine returns, the runtime ends the thread instead of
		// reusing it, so no other goroutine ever runs in this namespace.
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + n.Name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", n.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
