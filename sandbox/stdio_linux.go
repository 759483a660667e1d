package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// stdio are the sandbox's standard streams: always pipes, owned by the
// sandbox's root, that Run copies to and from Spec.Stdin/Stdout/Stderr.
//
// Always pipes, even for an *os.File: the workload never holds a
// descriptor of the caller's terminal or files (no terminal ioctls, no
// fchmod of the caller's file), and, owned by the sandbox's root, they can
// be reopened through /dev/stdout, /dev/stderr and /proc/self/fd, which a
// pipe or file owned by host root could not (the sandbox is not host root).
// The price: the command never sees a terminal (isatty is false).
type stdio struct {
	child  [3]*os.File // init's ends
	parent [3]*os.File // ours
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error // first copy error of stdout or stderr
}

func newStdio(s *Spec) (*stdio, error) {
	p := &stdio{}
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeAll()
			return nil, fmt.Errorf("sandbox: stdio pipe: %w", err)
		}
		// One inode serves both ends.
		if err := unix.Fchown(int(r.Fd()), int(s.HostIDBase), int(s.HostIDBase)); err != nil {
			r.Close()
			w.Close()
			p.closeAll()
			return nil, fmt.Errorf("sandbox: stdio pipe: %w", err)
		}
		if i == 0 {
			p.child[i], p.parent[i] = r, w
		} else {
			p.child[i], p.parent[i] = w, r
		}
	}
	return p, nil
}

// start begins copying, once init holds its ends (which are closed here).
func (p *stdio) start(s *Spec) {
	for _, f := range p.child {
		f.Close()
	}
	if s.Stdin == nil {
		p.parent[0].Close()
	} else {
		// Not waited for: a reader that never returns must not hold Run. It
		// ends at its next write once the sandbox is gone (EPIPE).
		go func(w *os.File) {
			copyStream(w, s.Stdin)
			w.Close()
		}(p.parent[0])
	}
	for i, dst := range []io.Writer{s.Stdout, s.Stderr} {
		p.wg.Add(1)
		go func(r *os.File, dst io.Writer) {
			defer p.wg.Done()
			defer r.Close()
			if dst == nil {
				dst = io.Discard
			}
			if err := copyStream(dst, r); err != nil {
				p.mu.Lock()
				if p.err == nil {
					p.err = err
				}
				p.mu.Unlock()
				copyStream(io.Discard, r) // keep the sandbox's writes flowing
			}
		}(p.parent[i+1], dst)
	}
}

// wait waits until stdout and stderr are copied to their end (every process
// of the sandbox is gone, so every write end is closed), and returns the
// first error writing them.
func (p *stdio) wait() error {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("sandbox: copy the command's output: %w", p.err)
	}
	return nil
}

// closeAll closes every end (when init was not started).
func (p *stdio) closeAll() {
	for i := range 3 {
		for _, f := range []*os.File{p.child[i], p.parent[i]} {
			if f != nil {
				f.Close()
			}
		}
	}
}

// copyStream copies until EOF; a closed pipe on either side is an end, not
// an error.
func copyStream(dst io.Writer, src io.Reader) error {
	_, err := io.Copy(dst, src)
	if errors.Is(err, os.ErrClosed) || errors.Is(err, unix.EPIPE) {
		return nil
	}
	return err
}
