package fuseuring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Handler serves one FUSE request: in is the request as /dev/fuse would
// deliver it (header, per-opcode struct, payload: one byte stream split
// over the slices); the reply (header and all) goes to out, as one byte
// stream over its slices; it returns the bytes written, 0 for a request
// without reply. go-fuse's fuse.ProtocolServer is one.
type Handler interface {
	HandleRequest(in, out [][]byte) (int, fuse.Status)
}

// Config says how large the ring is. Its zero value works, but for
// MaxPayload.
type Config struct {
	// Queues is the number of queues; 0: the number of possible CPUs,
	// which is what the kernel waits for before it sends requests through
	// the ring (it picks the queue of the CPU a request is made on).
	Queues int
	// Entries is the number of requests each queue holds at once (one
	// lane, a goroutine with an io_uring of its own, per entry);
	// default 4.
	Entries int
	// MaxPayload is the size of each entry's payload buffer, in bytes. It
	// must be at least the kernel's limit for the connection:
	// max(8192, max_write, max_pages*page size) (PayloadSize).
	MaxPayload int
	// Logf reports what goes wrong after Start (nil: discarded).
	Logf func(format string, args ...any)
}

// PayloadSize is the payload buffer the kernel requires of a connection
// that negotiated maxWrite and maxPages (the INIT reply's max_write and
// max_pages).
func PayloadSize(maxWrite, maxPages int) int {
	return max(8192, maxWrite, maxPages*os.Getpagesize())
}

// Ring serves a FUSE connection's requests through io_uring: Entries
// lanes per queue, each a goroutine with an io_uring and a ring entry of
// its own.
type Ring struct {
	queues int
	lanes  []*lane
	stop   int // eventfd: readable once the lanes must stop
	wg     sync.WaitGroup
	done   chan struct{}
}

// Start registers the ring entries of every queue on the connection of
// the /dev/fuse descriptor devFd (which must have answered INIT with
// FUSE_OVER_IO_URING) and serves them with h. Once every queue has an
// entry registered, the kernel sends requests through the ring (FORGET,
// INTERRUPT and notification replies still come through /dev/fuse, which
// the caller keeps serving). The ring serves until the connection ends
// (unmount, abort): then Wait returns.
//
// An error matching ErrNotSupported means the kernel refused the ring
// (enable_uring is N, or the connection did not negotiate it); nothing is
// left registered that would take requests, and the caller keeps serving
// /dev/fuse alone.
func Start(devFd int, h Handler, cfg Config) (*Ring, error) {
	if cfg.Queues <= 0 {
		n, err := possibleCPUs()
		if err != nil {
			return nil, err
		}
		cfg.Queues = n
	}
	if cfg.Entries <= 0 {
		cfg.Entries = 4
	}
	if cfg.MaxPayload < 8192 {
		return nil, fmt.Errorf("fuse ring: payload buffers of %d bytes are too small", cfg.MaxPayload)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fuse ring: eventfd: %w", err)
	}
	r := &Ring{queues: cfg.Queues, stop: stop, done: make(chan struct{})}
	results := make(chan error, cfg.Queues*cfg.Entries)
	for qid := 0; qid < cfg.Queues; qid++ {
		for range cfg.Entries {
			l := &lane{qid: qid, devFd: devFd, stop: stop, h: h, cfg: &cfg}
			r.lanes = append(r.lanes, l)
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				l.run(results)
			}()
		}
	}
	// A queue the kernel refused every entry of keeps the ring from
	// being ready: then no lane serves, and Start fails.
	refused := make([]int, cfg.Queues)
	var errs []error
	for range r.lanes {
		if err := <-results; err != nil {
			errs = append(errs, err)
		}
	}
	for _, l := range r.lanes {
		if !l.registered {
			refused[l.qid]++
		}
	}
	failed := false
	for qid, n := range refused {
		if n == cfg.Entries {
			failed = true
		} else if n > 0 {
			cfg.Logf("cairn: fuse ring queue %d serves %d of %d entries: %v", qid, cfg.Entries-n, cfg.Entries, errors.Join(errs...))
		}
	}
	go func() {
		r.wg.Wait()
		_ = unix.Close(r.stop)
		close(r.done)
	}()
	if failed {
		r.halt()
		<-r.done
		return nil, errs[0]
	}
	return r, nil
}

// mapped counts the lanes' buffer mappings alive in the process.
var mapped atomic.Int64

// BuffersMapped is the number of ring entries whose buffers are mapped
// in the process: those of the rings serving, and those of entries the
// kernel may still hold (a lane stopped before its entry ended keeps its
// buffers rather than have them reused under the kernel's writes).
func BuffersMapped() int { return int(mapped.Load()) }

// Wait waits until every lane has stopped: the connection ended.
func (r *Ring) Wait() { <-r.done }

// Requests is the number of requests served through the ring so far.
func (r *Ring) Requests() uint64 {
	var n uint64
	for _, l := range r.lanes {
		n += l.served.Load()
	}
	return n
}

// Queues is the number of queues the ring serves.
func (r *Ring) Queues() int { return r.queues }

// halt makes every lane that still runs stop (a registration failed):
// their entries are cancelled when their rings close.
func (r *Ring) halt() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(r.stop, one[:])
}

// possibleCPUs counts /sys/devices/system/cpu/possible ("0-3,8-11").
func possibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, fmt.Errorf("fuse ring: %w", err)
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("fuse ring: possible CPUs %q: %w", b, err)
		}
		c := a
		if isRange {
			if c, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("fuse ring: possible CPUs %q: %w", b, err)
			}
		}
		n += c - a + 1
	}
	if n <= 0 {
		return 0, fmt.Errorf("fuse ring: no possible CPUs in %q", b)
	}
	return n, nil
}

// The user_data of a lane's two kinds of completion.
const (
	entryTag = 0
	stopTag  = 1
)

// lane is one ring entry with the io_uring that carries it, served by one
// goroutine: it waits for a request, handles it inline, and commits the
// reply and waits for the next request in one io_uring_enter. The
// goroutine is not locked to a thread: a handler that blocks parks it like
// any other, and since each commit is submitted by the thread that then
// waits in the same system call, the kernel's task work (which copies the
// next request into the buffers) runs on the thread that waits for it.
type lane struct {
	qid    int
	devFd  int
	stop   int
	h      Handler
	cfg    *Config
	served atomic.Uint64

	registered bool // the kernel took the entry (set before run reports)

	mem     []byte
	hdr     *reqHeader
	payload []byte
	iov     []unix.Iovec // header and payload, in mem
	in      [3][]byte    // the request's slices for the handler
	out     [2][]byte    // the reply's
}

// run sets up and registers the lane, reports the outcome on started,
// then serves until its entry ended or the ring is halted.
func (l *lane) run(started chan<- error) {
	// The registration is submitted and waited for on one thread, so
	// the task work of the first request runs where the lane waits.
	runtime.LockOSThread()
	locked := true
	defer func() {
		if locked {
			runtime.UnlockOSThread()
		}
	}()

	r, err := l.setup()
	if err != nil {
		started <- err
		return
	}
	live := false
	defer func() {
		r.close()
		// An entry the kernel did not end (a lane stopped by halt)
		// may still point into mem: it stays mapped (for the
		// process's life) rather than be reused under the kernel's
		// writes.
		if !live {
			if unix.Munmap(l.mem) == nil {
				mapped.Add(-1)
			}
		}
	}()

	l.submitRegister(r)
	l.submitStopPoll(r)
	if err := r.enter(0); err != nil {
		started <- fmt.Errorf("fuse ring queue %d: %w", l.qid, err)
		return
	}
	// A refused registration completes at once; an accepted one only
	// when a request arrives.
	var regErr error
	live = true
	r.reap(func(c cqe) {
		if c.UserData == entryTag && c.Res < 0 {
			live = false
			regErr = fmt.Errorf("fuse ring queue %d: %w", l.qid, registerError(unix.Errno(-c.Res)))
		}
	})
	l.registered = live
	started <- regErr
	if !live {
		return
	}

	for live {
		if err := r.enter(1); err != nil {
			l.cfg.Logf("cairn: fuse ring queue %d: %v; its requests wait for the unmount", l.qid, err)
			return
		}
		stopped := false
		r.reap(func(c cqe) {
			if c.UserData == stopTag {
				stopped = true
				return
			}
			if c.Res < 0 {
				errno := unix.Errno(-c.Res)
				if errno != unix.ENOTCONN && errno != unix.ECONNABORTED && errno != unix.ECANCELED {
					l.cfg.Logf("cairn: fuse ring queue %d: entry ended: %v", l.qid, errno)
				}
				live = false
				return
			}
			if locked {
				runtime.UnlockOSThread()
				locked = false
			}
			l.submitCommit(r, l.handle())
			l.served.Add(1)
		})
		if stopped {
			return
		}
	}
}

func registerError(errno unix.Errno) error {
	switch errno {
	case unix.EOPNOTSUPP:
		return fmt.Errorf("%w: the kernel refused the registration (%v; is /sys/module/fuse/parameters/enable_uring N?)", ErrNotSupported, errno)
	case unix.EINVAL:
		return fmt.Errorf("%w: the kernel refused the registration (%v)", ErrNotSupported, errno)
	}
	return fmt.Errorf("register ring entry: %w", errno)
}

// setup makes the lane's io_uring and buffers.
func (l *lane) setup() (*uring, error) {
	r, err := newURing(2, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("%w: %v", ErrNotSupported, err)
		}
		return nil, fmt.Errorf("fuse ring queue %d: %w", l.qid, err)
	}
	page := os.Getpagesize()
	payload := roundUp(l.cfg.MaxPayload, page)
	// The payload (page aligned), then the header and the two iovecs.
	iovSize := int(unsafe.Sizeof(unix.Iovec{})) * 2
	size := payload + roundUp(roundUp(int(unsafe.Sizeof(reqHeader{})), 64)+iovSize, page)
	l.mem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("fuse ring queue %d: buffers: %w", l.qid, err)
	}
	mapped.Add(1)
	l.payload = l.mem[:l.cfg.MaxPayload]
	l.hdr = (*reqHeader)(unsafe.Pointer(&l.mem[payload]))
	off := payload + roundUp(int(unsafe.Sizeof(reqHeader{})), 64)
	l.iov = unsafe.Slice((*unix.Iovec)(unsafe.Pointer(&l.mem[off])), 2)
	return r, nil
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// submitRegister queues the REGISTER of the lane's entry.
func (l *lane) submitRegister(r *uring) {
	l.iov[0].Base = (*byte)(unsafe.Pointer(l.hdr))
	l.iov[0].SetLen(int(unsafe.Sizeof(reqHeader{})))
	l.iov[1].Base = &l.payload[0]
	l.iov[1].SetLen(len(l.payload))
	s := r.next()
	s.Opcode = opURingCmd
	s.Fd = int32(l.devFd)
	s.Off = cmdRegister
	s.Addr = uint64(uintptr(unsafe.Pointer(&l.iov[0])))
	s.Len = 2
	s.UserData = entryTag
	c := (*cmdReq)(unsafe.Pointer(&s.Cmd[0]))
	c.QID = uint16(l.qid)
}

// submitCommit queues the COMMIT_AND_FETCH of the entry's reply.
func (l *lane) submitCommit(r *uring, commitID uint64) {
	s := r.next()
	s.Opcode = opURingCmd
	s.Fd = int32(l.devFd)
	s.Off = cmdCommitAndFetch
	s.UserData = entryTag
	c := (*cmdReq)(unsafe.Pointer(&s.Cmd[0]))
	c.CommitID = commitID
	c.QID = uint16(l.qid)
}

// submitStopPoll queues a poll of the ring's stop eventfd (one-shot; it
// is never read, so every lane's poll completes).
func (l *lane) submitStopPoll(r *uring) {
	s := r.next()
	s.Opcode = opPollAdd
	s.Fd = int32(l.stop)
	s.OpFlags = unix.POLLIN
	s.UserData = stopTag
}

// handle serves the request in the lane's entry and writes its reply
// there; it returns the request's commit id.
func (l *lane) handle() uint64 {
	h := l.hdr
	commitID := h.EntInOut.CommitID
	inLen := int(binary.LittleEndian.Uint32(h.InOut[0:4]))
	unique := binary.LittleEndian.Uint64(h.InOut[8:16])
	payloadSz := int(h.EntInOut.PayloadSz)
	opLen := inLen - inHeaderSize - payloadSz
	n, status := 0, fuse.EIO
	if opLen >= 0 && opLen <= opInSize && payloadSz <= len(l.payload) {
		l.in = [3][]byte{h.InOut[:inHeaderSize], h.OpIn[:opLen], l.payload[:payloadSz]}
		l.out = [2][]byte{h.InOut[:outHeaderSize], l.payload}
		n, status = l.h.HandleRequest(l.in[:], l.out[:])
	} else {
		l.cfg.Logf("cairn: fuse ring queue %d: malformed request (length %d, payload %d)", l.qid, inLen, payloadSz)
	}
	switch {
	case status != fuse.OK || (n > 0 && n < outHeaderSize):
		// The handler could not parse the request: answer EIO, as
		// the kernel waits for an answer to every request it gave.
		putOutHeader(h, -int32(unix.EIO), unique)
		h.EntInOut.PayloadSz = 0
	case n == 0:
		// No reply (an interrupted request the server drops): the
		// commit still ends the request and gives the entry back.
		putOutHeader(h, -int32(unix.EINTR), unique)
		h.EntInOut.PayloadSz = 0
	default:
		h.EntInOut.PayloadSz = uint32(n - outHeaderSize)
	}
	return commitID
}

func putOutHeader(h *reqHeader, errno int32, unique uint64) {
	binary.LittleEndian.PutUint32(h.InOut[0:4], outHeaderSize)
	binary.LittleEndian.PutUint32(h.InOut[4:8], uint32(errno))
	binary.LittleEndian.PutUint64(h.InOut[8:16], unique)
}
