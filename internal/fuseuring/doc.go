// Package fuseuring serves a FUSE connection's requests through io_uring
// (FUSE over io_uring, Linux 6.14 and later with the fuse module's
// enable_uring parameter on), the transport go-fuse lacks.
//
// The connection is made and INIT is answered the usual way, over
// /dev/fuse, with FUSE_OVER_IO_URING among the flags. Start then
// registers ring entries on the /dev/fuse descriptor (io_uring URING_CMD
// with 128-byte SQEs) for every queue: one queue per possible CPU (the
// kernel sends a request to the queue of the CPU it was made on, and
// sends none through the ring until every queue has an entry), a few
// entries per queue. Each entry is a lane: a header buffer (struct
// fuse_uring_req_header) and a payload buffer of the connection's maximum
// size, mapped outside Go's heap, an io_uring of its own, and one
// goroutine. A completion is a request in the lane's buffers; the lane
// hands it to a Handler (go-fuse's fuse.ProtocolServer parses and
// dispatches it) on its own goroutine, and submits the reply with
// COMMIT_AND_FETCH in the same io_uring_enter that waits for the lane's
// next request: one system call per request, no hand-off between
// goroutines, no allocation in the lane.
//
// The lane's goroutine is not locked to a thread, so a handler that
// blocks (a lock, Badger's commit goroutine) parks an ordinary goroutine
// (parking a locked thread costs two thread hand-offs each time). The
// kernel copies a request into the buffers in task work of the thread
// that submitted the entry's last command; since that command is
// submitted by the system call that then waits, it is the thread that
// waits. (The registration is submitted and first waited for with the
// thread locked, for the same reason.) The rings are plain: SINGLE_ISSUER
// and DEFER_TASKRUN would need the submitting thread to stay the same.
//
// What still goes over /dev/fuse, which the caller keeps serving: FORGET,
// INTERRUPT, requests made before the ring was ready, and notifications
// (the daemon's InodeNotify, EntryNotify: written to /dev/fuse), as well
// as passthrough backing-file registration (an ioctl on /dev/fuse). The
// kernel matches an INTERRUPT's reply against the requests of /dev/fuse
// only, so the caller must hand an INTERRUPT to the same Handler that
// serves the ring (package fs does: its ProtocolServer then cancels the
// request in flight on a lane).
//
// A queue serves up to Entries requests at once (one per lane); the
// kernel holds further requests until an entry is committed, and gives
// the next request to the entry committed last.
//
// The ring ends with the connection: at unmount (or abort) the kernel
// ends every entry (ENOTCONN, ECONNABORTED), and the lanes stop, close
// their rings and unmap their buffers; Wait returns then.
package fuseuring
