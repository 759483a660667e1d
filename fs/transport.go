package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/fuseuring"
)

// Transport is how the kernel's FUSE requests reach the daemon.
type Transport string

const (
	// TransportAuto serves through io_uring where the kernel offers it,
	// and through /dev/fuse where it does not.
	TransportAuto Transport = "auto"
	// TransportURing serves through io_uring (FUSE over io_uring, Linux
	// 6.14 and later with /sys/module/fuse/parameters/enable_uring Y), or
	// refuses to mount.
	TransportURing Transport = "uring"
	// TransportDev serves by reading and writing /dev/fuse.
	TransportDev Transport = "dev"

	// TransportDefault is the transport of Options.Transport "": io_uring
	// where the kernel offers it (it serves cairn's requests with less
	// CPU each than /dev/fuse), else /dev/fuse.
	TransportDefault = TransportAuto
)

// ParseTransport parses "auto", "uring" or "dev" ("" is TransportDefault).
func ParseTransport(s string) (Transport, error) {
	switch t := Transport(s); t {
	case "":
		return TransportDefault, nil
	case TransportAuto, TransportURing, TransportDev:
		return t, nil
	}
	return "", fmt.Errorf("%w: FUSE transport %q: want auto, uring or dev", ErrInvalid, s)
}

// The names Server.Transport reports.
const (
	TransportNameURing = "io_uring"
	TransportNameDev   = "/dev/fuse"
)

// Server is a mounted FS being served.
type Server struct {
	srv   *fuse.Server
	ring  *fuseuring.Ring // nil: served through /dev/fuse alone
	why   string          // why not through io_uring, when asked (auto)
	dir   string
	done  chan struct{}
	unmnt sync.Once
	err   error
}

// Transport says how the mount is served: TransportNameURing or
// TransportNameDev.
func (s *Server) Transport() string {
	if s.ring != nil {
		return TransportNameURing
	}
	return TransportNameDev
}

// Fallback says why a mount asked to serve through io_uring where
// available (TransportAuto) serves through /dev/fuse; "" otherwise.
func (s *Server) Fallback() string { return s.why }

// Queues is the number of io_uring queues serving the mount (0 through
// /dev/fuse).
func (s *Server) Queues() int {
	if s.ring == nil {
		return 0
	}
	return s.ring.Queues()
}

// RingRequests is the number of requests served through io_uring so far.
func (s *Server) RingRequests() uint64 {
	if s.ring == nil {
		return 0
	}
	return s.ring.Requests()
}

// KernelSettings is the kernel's INIT request.
func (s *Server) KernelSettings() *fuse.InitIn { return s.srv.KernelSettings() }

// Wait waits until the mount has gone (unmounted or its connection
// aborted) and every server goroutine has stopped.
func (s *Server) Wait() { <-s.done }

// Unmount unmounts the mount and waits until it has stopped serving. A
// busy mount is tried a few times (the kernel may still see files open
// that were just closed).
func (s *Server) Unmount() error {
	s.unmnt.Do(func() {
		delay := time.Duration(0)
		for range 5 {
			s.err = unix.Unmount(s.dir, 0)
			if s.err != unix.EBUSY {
				break
			}
			delay = 2*delay + 5*time.Millisecond
			time.Sleep(delay)
		}
		if s.err == unix.EINVAL { // not mounted (any more)
			s.err = nil
		}
		if s.err != nil {
			s.err = fmt.Errorf("unmount %s: %w", s.dir, s.err)
			return
		}
		<-s.done
	})
	return s.err
}

// mountDev mounts the FUSE filesystem at dir with mount(2) on a /dev/fuse
// descriptor of its own (close-on-exec, known to the ring), with the
// options go-fuse's direct mount uses.
func mountDev(dir string, o *fuse.MountOptions) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return -1, err
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	data := fmt.Sprintf("fd=%d,rootmode=%o,user_id=%d,group_id=%d,max_read=%d", fd, st.Mode&unix.S_IFMT, os.Geteuid(), os.Getegid(), o.MaxWrite)
	for _, opt := range o.Options {
		data += "," + opt
	}
	if o.AllowOther {
		data += ",allow_other"
	}
	if err := unix.Mount(o.FsName, dir, "fuse."+o.Name, unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// startRing serves the connection of fd through io_uring, if the kernel
// offered it at INIT (and was told yes). It returns the request parser
// that serves the ring, for serveDev.
func startRing(fd int, raw fuse.RawFileSystem, opts *fuse.MountOptions, ks *fuse.InitIn, logf func(string, ...any)) (*fuse.ProtocolServer, *fuseuring.Ring, error) {
	if ks.Flags64()&fuse.CAP_OVER_IO_URING == 0 {
		reason := "the kernel did not offer it"
		if b, err := os.ReadFile("/sys/module/fuse/parameters/enable_uring"); err == nil && len(b) > 0 && b[0] == 'N' {
			reason = "/sys/module/fuse/parameters/enable_uring is N"
		} else if os.IsNotExist(err) {
			reason = "this kernel has none (Linux 6.14 and later with CONFIG_FUSE_IO_URING)"
		}
		return nil, nil, fmt.Errorf("%w: FUSE over io_uring: %s", ErrTransport, reason)
	}
	ps := fuse.NewProtocolServer(raw, opts)
	if err := replayInit(ps, ks); err != nil {
		return nil, nil, err
	}
	pages := (opts.MaxWrite-1)/os.Getpagesize() + 1
	ring, err := fuseuring.Start(fd, ps, fuseuring.Config{MaxPayload: fuseuring.PayloadSize(opts.MaxWrite, pages), Logf: logf})
	if errors.Is(err, fuseuring.ErrNotSupported) {
		return nil, nil, fmt.Errorf("%w: %w", ErrTransport, err)
	}
	if err != nil {
		return nil, nil, err
	}
	return ps, ring, nil
}

// devReaders is the number of goroutines that read /dev/fuse while the
// ring serves: it carries FORGET and INTERRUPT only.
const devReaders = 2

// serveDev serves what the kernel sends over /dev/fuse (fd) while the
// ring serves the rest, with ps, until the connection ends.
func serveDev(fd int, ps *fuse.ProtocolServer, maxWrite int, logf func(string, ...any)) {
	var wg sync.WaitGroup
	for range devReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := make([]byte, maxWrite+os.Getpagesize())
			out := make([]byte, os.Getpagesize())
			for {
				n, err := unix.Read(fd, in)
				switch err {
				case nil:
				case unix.EINTR, unix.ENOENT, unix.EAGAIN: // ENOENT: the request was aborted
					continue
				case unix.ENODEV: // unmounted, or aborted
					return
				default:
					logf("cairn: read /dev/fuse: %v", err)
					return
				}
				if n >= int(unsafe.Sizeof(fuse.InHeader{})) && binary.LittleEndian.Uint32(in[4:]) == opInterrupt {
					interrupt(fd, ps, in[:n], out)
					continue
				}
				if m, status := ps.HandleRequest([][]byte{in[:n]}, [][]byte{out}); status == fuse.OK && m > 0 {
					_, _ = unix.Write(fd, out[:m])
				}
			}
		}()
	}
	wg.Wait()
}

// interrupt serves an INTERRUPT. The request it names may be on its way
// to a ring lane that has not taken it in hand yet (the parser then does
// not know it): it is tried again for a while before the kernel is told
// EAGAIN (which, for a request the ring carries, it drops).
func interrupt(fd int, ps *fuse.ProtocolServer, req, out []byte) {
	if m, done := tryInterrupt(ps, req, out); done {
		if m > 0 {
			_, _ = unix.Write(fd, out[:m])
		}
		return
	}
	req = append([]byte(nil), req...)
	go func() {
		out := make([]byte, len(out))
		m, done := 0, false
		for delay := time.Millisecond; !done && delay < time.Second; delay *= 2 {
			time.Sleep(delay)
			m, done = tryInterrupt(ps, req, out)
		}
		if m > 0 {
			_, _ = unix.Write(fd, out[:m])
		}
	}()
}

// tryInterrupt hands ps the INTERRUPT req; it returns the reply's length
// (0: none) and whether the interrupt was delivered or is moot.
func tryInterrupt(ps *fuse.ProtocolServer, req, out []byte) (int, bool) {
	m, status := ps.HandleRequest([][]byte{req}, [][]byte{out})
	if status != fuse.OK || m == 0 {
		return 0, true // delivered (no reply), or unparsable
	}
	return m, int32(binary.LittleEndian.Uint32(out[4:])) != -int32(unix.EAGAIN)
}

// opInit and opInterrupt are FUSE_INIT and FUSE_INTERRUPT.
const (
	opInit      = 26
	opInterrupt = 36
)

// replayInit gives ps the kernel's INIT request that the /dev/fuse server
// answered, so that it parses requests as negotiated (struct sizes,
// flags): both answer it from the same options.
func replayInit(ps *fuse.ProtocolServer, ks *fuse.InitIn) error {
	// go-fuse's InitIn starts with the request's fuse_in_header.
	in := make([]byte, unsafe.Sizeof(*ks))
	copy(in, unsafe.Slice((*byte)(unsafe.Pointer(ks)), len(in)))
	binary.LittleEndian.PutUint32(in[0:], uint32(len(in)))
	binary.LittleEndian.PutUint32(in[4:], opInit)
	binary.LittleEndian.PutUint64(in[8:], 1)
	out := make([]byte, unsafe.Sizeof(fuse.InitOut{})+16)
	n, status := ps.HandleRequest([][]byte{in}, [][]byte{out})
	if status != fuse.OK || n < 16 || binary.LittleEndian.Uint32(out[4:]) != 0 {
		return fmt.Errorf("FUSE over io_uring: the request parser refused INIT (%v, error %d)", status, int32(binary.LittleEndian.Uint32(out[4:])))
	}
	return nil
}
