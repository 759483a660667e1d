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
	// Entries is the number of requests each queue holds at once;
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

// Ring serves a FUSE connection's requests through io_uring, a queue per
// CPU, each served by a goroutine on a thread of its own.
type Ring struct {
	queues []*queue
	served atomic.Uint64 // requests served through the ring
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
	r := &Ring{done: make(chan struct{})}
	results := make(chan error, cfg.Queues)
	for qid := 0; qid < cfg.Queues; qid++ {
		q := &queue{qid: qid, devFd: devFd, h: h, cfg: cfg, stop: -1, served: &r.served}
		r.queues = append(r.queues, q)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			q.run(results)
		}()
	}
	var errs []error
	for range cfg.Queues {
		if err := <-results; err != nil {
			errs = append(errs, err)
		}
	}
	go func() { r.wg.Wait(); close(r.done) }()
	if len(errs) > 0 {
		r.stop()
		<-r.done
		return nil, errs[0]
	}
	return r, nil
}

// Wait waits until every queue has stopped: the connection ended.
func (r *Ring) Wait() { <-r.done }

// Requests is the number of requests served through the ring so far.
func (r *Ring) Requests() uint64 { return r.served.Load() }

// Queues is the number of queues the ring serves.
func (r *Ring) Queues() int { return len(r.queues) }

// stop makes every queue that is still running stop (a registration
// failed): their entries are cancelled when their rings close.
func (r *Ring) stop() {
	for _, q := range r.queues {
		q.wake()
	}
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

// wakeTag is the user_data of a queue's read of its wake eventfd.
const wakeTag = ^uint64(0)

// queue is one ring queue: its io_uring, and its entries' buffers in one
// anonymous mapping (outside Go's heap: the kernel writes requests into
// them whenever it has one).
type queue struct {
	qid    int
	devFd  int
	h      Handler
	cfg    Config
	served *atomic.Uint64

	mu       sync.Mutex
	stop     int // the wake eventfd; -1 before run made it and after it closed it
	stopping atomic.Bool
	sleeping atomic.Bool // the thread waits in io_uring_enter: wake it for a commit

	cmu     sync.Mutex
	commits []commit // replies ready, for the thread to commit

	mem     []byte
	entries []entry
	iovs    []unix.Iovec // two per entry (header, payload), in mem
	wakeBuf []byte       // 8 bytes in mem
}

// entry is one ring entry: the offsets of its header and payload in mem.
type entry struct {
	hdr     *reqHeader
	payload []byte
	live    bool // registered, and not ended by the kernel
}

func (q *queue) wake() {
	q.stopping.Store(true)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stop >= 0 {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(q.stop, one[:])
	}
}

// run sets up and registers the queue, reports the outcome on started,
// then serves until every entry ended.
func (q *queue) run(started chan<- error) {
	// The kernel copies requests into the buffers from the task that
	// submitted the entry (task work), and with SINGLE_ISSUER only that
	// thread may submit: the queue keeps its thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	r, err := q.setup()
	if err != nil {
		started <- err
		return
	}
	keepBuffers := false
	defer func() {
		q.mu.Lock()
		_ = unix.Close(q.stop)
		q.stop = -1
		q.mu.Unlock()
		r.close()
		// Entries the kernel did not end (a queue stopped by wake)
		// still point into mem: it stays mapped (for the process's
		// life) rather than be reused under the kernel's writes.
		if !keepBuffers {
			_ = unix.Munmap(q.mem)
		}
	}()

	// Register every entry, and the read of the wake eventfd.
	for i := range q.entries {
		q.submitRegister(r, i)
	}
	q.submitWakeRead(r)
	if err := r.enter(0); err != nil {
		started <- fmt.Errorf("fuse ring queue %d: %w", q.qid, err)
		return
	}
	// A refused registration completes at once; an accepted one only
	// when a request arrives.
	var regErr error
	r.reap(func(c cqe) {
		if c.UserData != wakeTag && c.Res < 0 {
			q.entries[c.UserData].live = false
			regErr = registerError(unix.Errno(-c.Res))
		}
	})
	if regErr != nil && q.liveEntries() == 0 {
		// The ring is not ready without this queue, so the kernel gave
		// no request to the other queues: Start stops them.
		started <- fmt.Errorf("fuse ring queue %d: %w", q.qid, regErr)
		return
	}
	if regErr != nil {
		// Once every queue has an entry the ring may be ready: this
		// queue must serve with the entries it has.
		q.cfg.Logf("cairn: fuse ring queue %d serves %d of %d entries: %v", q.qid, q.liveEntries(), len(q.entries), regErr)
	}
	started <- nil
	keepBuffers = q.serve(r)
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

// setup makes the queue's io_uring, wake eventfd and buffers.
func (q *queue) setup() (*uring, error) {
	sqSize := uint32(q.cfg.Entries + 1)
	r, err := newURing(sqSize, setupSingleIssuer|setupDeferTaskrun)
	if errors.Is(err, unix.EINVAL) {
		r, err = newURing(sqSize, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("%w: %v", ErrNotSupported, err)
		}
		return nil, fmt.Errorf("fuse ring queue %d: %w", q.qid, err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("fuse ring queue %d: eventfd: %w", q.qid, err)
	}
	q.mu.Lock()
	q.stop = efd
	q.mu.Unlock()

	page := os.Getpagesize()
	hdrSize := roundUp(int(unsafe.Sizeof(reqHeader{})), 64)
	payload := roundUp(q.cfg.MaxPayload, page)
	// Per entry: its payload (page aligned), then all headers, the two
	// iovecs of each entry, and the wake buffer.
	iovSize := int(unsafe.Sizeof(unix.Iovec{})) * 2
	n := q.cfg.Entries
	size := n*payload + roundUp(n*(hdrSize+iovSize)+8, page)
	q.mem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		q.mu.Lock()
		_ = unix.Close(efd)
		q.stop = -1
		q.mu.Unlock()
		r.close()
		return nil, fmt.Errorf("fuse ring queue %d: buffers: %w", q.qid, err)
	}
	off := n * payload
	q.entries = make([]entry, n)
	for i := range q.entries {
		e := &q.entries[i]
		e.payload = q.mem[i*payload : i*payload+q.cfg.MaxPayload]
		e.hdr = (*reqHeader)(unsafe.Pointer(&q.mem[off]))
		off += hdrSize
	}
	q.iovs = unsafe.Slice((*unix.Iovec)(unsafe.Pointer(&q.mem[off])), 2*n)
	off += iovSize * n
	q.wakeBuf = q.mem[off : off+8]
	return r, nil
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// submitRegister queues the REGISTER of entry i.
func (q *queue) submitRegister(r *uring, i int) {
	e := &q.entries[i]
	iov := q.iovs[2*i : 2*i+2]
	iov[0].Base = (*byte)(unsafe.Pointer(e.hdr))
	iov[0].SetLen(int(unsafe.Sizeof(reqHeader{})))
	iov[1].Base = &e.payload[0]
	iov[1].SetLen(len(e.payload))
	s := r.next()
	s.Opcode = opURingCmd
	s.Fd = int32(q.devFd)
	s.Off = cmdRegister
	s.Addr = uint64(uintptr(unsafe.Pointer(&iov[0])))
	s.Len = 2
	s.UserData = uint64(i)
	c := (*cmdReq)(unsafe.Pointer(&s.Cmd[0]))
	c.QID = uint16(q.qid)
	e.live = true
}

// submitCommit queues the COMMIT_AND_FETCH of entry i's reply.
func (q *queue) submitCommit(r *uring, i int, commitID uint64) {
	s := r.next()
	s.Opcode = opURingCmd
	s.Fd = int32(q.devFd)
	s.Off = cmdCommitAndFetch
	s.UserData = uint64(i)
	c := (*cmdReq)(unsafe.Pointer(&s.Cmd[0]))
	c.CommitID = commitID
	c.QID = uint16(q.qid)
}

func (q *queue) liveEntries() int {
	n := 0
	for _, e := range q.entries {
		if e.live {
			n++
		}
	}
	return n
}

// serve answers requests until every entry has ended (the connection
// ended: the kernel ends each entry with ENOTCONN or ECONNABORTED) or the
// queue is woken to stop. It reports whether entries may still be
// registered (stopped by wake).
//
// The queue's thread only submits and reaps: each request is served by
// the entry's worker goroutine, which hands its commit back and wakes the
// thread (the wake eventfd) if it sleeps. A handler that blocks (on a
// lock, on Badger's commit goroutine) then parks an ordinary goroutine,
// not a locked thread: parking one costs two thread handoffs per block.
func (q *queue) serve(r *uring) (stillRegistered bool) {
	work := make([]chan struct{}, len(q.entries))
	var wg sync.WaitGroup
	for i := range q.entries {
		work[i] = make(chan struct{}, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work[i] {
				q.post(i, q.handle(&q.entries[i]))
			}
		}()
	}
	defer func() {
		for _, w := range work {
			close(w)
		}
		wg.Wait()
	}()

	live := q.liveEntries()
	stopped := false
	var commits []commit
	for live > 0 && !stopped {
		commits = q.takeCommits(commits[:0])
		for _, c := range commits {
			q.submitCommit(r, c.entry, c.id)
		}
		q.served.Add(uint64(len(commits)))
		// Sleep only with no reply left behind: a worker that posts
		// after this sees sleeping and wakes the thread.
		q.sleeping.Store(true)
		if q.hasCommits() {
			q.sleeping.Store(false)
			continue
		}
		err := r.enter(1)
		q.sleeping.Store(false)
		if err != nil {
			q.cfg.Logf("cairn: fuse ring queue %d: %v; its requests wait for the unmount", q.qid, err)
			return true
		}
		r.reap(func(c cqe) {
			if c.UserData == wakeTag {
				if q.stopping.Load() {
					stopped = true
					return
				}
				q.submitWakeRead(r)
				return
			}
			i := int(c.UserData)
			if c.Res < 0 {
				errno := unix.Errno(-c.Res)
				if errno != unix.ENOTCONN && errno != unix.ECONNABORTED && errno != unix.ECANCELED {
					q.cfg.Logf("cairn: fuse ring queue %d: entry %d ended: %v", q.qid, i, errno)
				}
				q.entries[i].live = false
				live--
				return
			}
			work[i] <- struct{}{}
		})
	}
	return live > 0
}

// commit is a reply ready in an entry, to be committed by the queue.
type commit struct {
	entry int
	id    uint64
}

// post hands the commit of entry i to the queue's thread, and wakes it if
// it sleeps.
func (q *queue) post(i int, id uint64) {
	q.cmu.Lock()
	q.commits = append(q.commits, commit{i, id})
	q.cmu.Unlock()
	if q.sleeping.CompareAndSwap(true, false) {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(q.stop, one[:])
	}
}

func (q *queue) takeCommits(dst []commit) []commit {
	q.cmu.Lock()
	dst = append(dst, q.commits...)
	q.commits = q.commits[:0]
	q.cmu.Unlock()
	return dst
}

func (q *queue) hasCommits() bool {
	q.cmu.Lock()
	defer q.cmu.Unlock()
	return len(q.commits) > 0
}

// submitWakeRead queues the read of the wake eventfd.
func (q *queue) submitWakeRead(r *uring) {
	s := r.next()
	s.Opcode = opRead
	s.Fd = int32(q.stop)
	s.Addr = uint64(uintptr(unsafe.Pointer(&q.wakeBuf[0])))
	s.Len = 8
	s.UserData = wakeTag
}

// handle serves the request in e and writes its reply there; it returns
// the request's commit id.
func (q *queue) handle(e *entry) uint64 {
	h := e.hdr
	commitID := h.EntInOut.CommitID
	inLen := int(binary.LittleEndian.Uint32(h.InOut[0:4]))
	unique := binary.LittleEndian.Uint64(h.InOut[8:16])
	payloadSz := int(h.EntInOut.PayloadSz)
	opLen := inLen - inHeaderSize - payloadSz
	n, status := 0, fuse.EIO
	if opLen >= 0 && opLen <= opInSize && payloadSz <= len(e.payload) {
		in := [][]byte{h.InOut[:inHeaderSize], h.OpIn[:opLen], e.payload[:payloadSz]}
		out := [][]byte{h.InOut[:outHeaderSize], e.payload}
		n, status = q.h.HandleRequest(in, out)
	} else {
		q.cfg.Logf("cairn: fuse ring queue %d: malformed request (length %d, payload %d)", q.qid, inLen, payloadSz)
	}
	switch {
	case status != fuse.OK || (n > 0 && n < outHeaderSize):
		// The handler could not parse the request: answer EIO, as
		// the kernel waits for an answer to every request it gave.
		putOutHeader(h, -int32(unix.EIO), unique)
		h.EntInOut.PayloadSz = 0
	case n == 0:
		// No reply (NOTIFY_REPLY): the commit still ends the request and
		// gives the entry back.
		putOutHeader(h, 0, unique)
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
