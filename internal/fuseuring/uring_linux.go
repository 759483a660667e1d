package fuseuring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A minimal io_uring: setup, the mapped rings, SQE128 submission and
// completion reaping, through golang.org/x/sys/unix (no cgo, no liburing).
// The constants are those of include/uapi/linux/io_uring.h.

const (
	setupSQE128       = 1 << 10 // IORING_SETUP_SQE128: 128-byte SQEs (URING_CMD's 80-byte command area)
	setupSingleIssuer = 1 << 12 // IORING_SETUP_SINGLE_ISSUER
	setupDeferTaskrun = 1 << 13 // IORING_SETUP_DEFER_TASKRUN: completions run only in io_uring_enter(GETEVENTS)

	featSingleMmap = 1 << 0 // IORING_FEAT_SINGLE_MMAP

	offSQRing = 0          // IORING_OFF_SQ_RING
	offCQRing = 0x8000000  // IORING_OFF_CQ_RING
	offSQEs   = 0x10000000 // IORING_OFF_SQES

	enterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

	opNop      = 0  // IORING_OP_NOP
	opPollAdd  = 6  // IORING_OP_POLL_ADD
	opURingCmd = 46 // IORING_OP_URING_CMD

	sqeSize = 128 // with setupSQE128
	cqeSize = 16
)

// sqOffsets is struct io_sqring_offsets.
type sqOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

// cqOffsets is struct io_cqring_offsets.
type cqOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, CQEs, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

// params is struct io_uring_params.
type params struct {
	SQEntries, CQEntries, Flags, SQThreadCPU, SQThreadIdle, Features, WQFd uint32
	Resv                                                                   [3]uint32
	SQOff                                                                  sqOffsets
	CQOff                                                                  cqOffsets
}

// sqe is struct io_uring_sqe in its 128-byte form.
type sqe struct {
	Opcode      uint8
	Flags       uint8
	Ioprio      uint16
	Fd          int32
	Off         uint64 // for URING_CMD: cmd_op in the low 32 bits
	Addr        uint64
	Len         uint32
	OpFlags     uint32
	UserData    uint64
	BufIndex    uint16
	Personality uint16
	FileIndex   int32
	Cmd         [80]byte // addr3 and pad2, then the SQE128 extension
}

// cqe is struct io_uring_cqe.
type cqe struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// uring is one io_uring instance with SQE128 entries. It is not safe for
// concurrent use; with setupSingleIssuer, only the thread that made it
// may submit.
type uring struct {
	fd      int
	ringMem []byte
	cqMem   []byte // nil with featSingleMmap
	sqeMem  []byte

	sqHead, sqTail *uint32
	sqMask         uint32
	sqArray        []uint32
	sqes           []sqe
	tail           uint32 // the next SQE to fill (not yet published)

	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []cqe
}

// newURing sets up a ring of at least entries SQEs with flags (beyond
// SQE128). It tries single-issuer with deferred task work first, and
// plain flags if the kernel refuses them.
func newURing(entries uint32, flags uint32) (*uring, error) {
	var p params
	p.Flags = setupSQE128 | flags
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &uring{fd: int(fd)}
	if err := r.mmap(&p); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *uring) mmap(p *params) error {
	sqSize := int(p.SQOff.Array) + int(p.SQEntries)*4
	cqSize := int(p.CQOff.CQEs) + int(p.CQEntries)*cqeSize
	if p.Features&featSingleMmap != 0 {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	r.ringMem, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap the io_uring SQ ring: %w", err)
	}
	cq := r.ringMem
	if p.Features&featSingleMmap == 0 {
		r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("mmap the io_uring CQ ring: %w", err)
		}
		cq = r.cqMem
	}
	r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.SQEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap the io_uring SQEs: %w", err)
	}
	r.sqHead = (*uint32)(unsafe.Pointer(&r.ringMem[p.SQOff.Head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&r.ringMem[p.SQOff.Tail]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&r.ringMem[p.SQOff.RingMask]))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Pointer(&r.ringMem[p.SQOff.Array])), p.SQEntries)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMem[0])), p.SQEntries)
	r.tail = atomic.LoadUint32(r.sqTail)
	r.cqHead = (*uint32)(unsafe.Pointer(&cq[p.CQOff.Head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&cq[p.CQOff.Tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&cq[p.CQOff.RingMask]))
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&cq[p.CQOff.CQEs])), p.CQEntries)
	return nil
}

// next returns a zeroed SQE to fill, or nil if the submission queue is
// full. It is published by submit.
func (r *uring) next() *sqe {
	head := atomic.LoadUint32(r.sqHead)
	if r.tail-head > r.sqMask {
		return nil
	}
	i := r.tail & r.sqMask
	s := &r.sqes[i]
	*s = sqe{}
	r.sqArray[i] = i
	r.tail++
	return s
}

// enter publishes the filled SQEs, submits them, and with wait > 0 waits
// until that many completions are there. EINTR (a signal, Go's preemption)
// is retried.
func (r *uring) enter(wait uint32) error {
	atomic.StoreUint32(r.sqTail, r.tail)
	for {
		pending := r.tail - atomic.LoadUint32(r.sqHead)
		var flags uintptr
		if wait > 0 || pending == 0 {
			flags = enterGetEvents
		}
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(pending), uintptr(wait), flags, 0, 0)
		switch errno {
		case 0:
			if wait > 0 && r.ready() == 0 {
				continue
			}
			return nil
		case unix.EINTR:
			continue
		case unix.EAGAIN, unix.EBUSY:
			// The completion queue is full: the caller reaps it.
			if r.ready() > 0 {
				return nil
			}
			continue
		default:
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
	}
}

// ready is the number of completions waiting.
func (r *uring) ready() uint32 {
	return atomic.LoadUint32(r.cqTail) - atomic.LoadUint32(r.cqHead)
}

// reap calls f with each waiting completion (a copy) and consumes them.
func (r *uring) reap(f func(cqe)) int {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	n := 0
	for ; head != tail; head++ {
		c := r.cqes[head&r.cqMask]
		atomic.StoreUint32(r.cqHead, head+1)
		f(c)
		n++
	}
	return n
}

// close unmaps the rings and closes the ring's descriptor, which cancels
// what is still in flight.
func (r *uring) close() {
	for _, m := range [][]byte{r.sqeMem, r.cqMem, r.ringMem} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMem, r.cqMem, r.ringMem = nil, nil, nil
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}
