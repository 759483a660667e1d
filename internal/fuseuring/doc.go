// Package fuseuring serves a FUSE connection's requests through io_uring
// (FUSE over io_uring, Linux 6.14 and later with the fuse module's
// enable_uring parameter on), the transport go-fuse lacks.
//
// The connection is made and INIT is answered the usual way, over
// /dev/fuse, with FUSE_OVER_IO_URING among the flags. Start then
// registers ring entries on the /dev/fuse descriptor (io_uring URING_CMD
// with 128-byte SQEs): one queue per possible CPU (the kernel sends a
// request to the queue of the CPU it was made on, and sends none through
// the ring until every queue has an entry), a few entries per queue, each
// a header buffer (struct fuse_uring_req_header) and a payload buffer of
// the connection's maximum size, mapped outside Go's heap. Each queue is
// served by one goroutine locked to its thread: a completion is a request
// in an entry's buffers; the entry's worker goroutine hands it to a
// Handler (go-fuse's fuse.ProtocolServer parses and dispatches it) and
// posts the reply, in the same buffers, back to the queue's thread, which
// sends it with COMMIT_AND_FETCH (that also waits for the entry's next
// request). The locked thread never runs the filesystem: a handler that
// blocks (a lock, Badger's commit goroutine) parks a plain goroutine,
// where parking a locked thread costs two thread handoffs each time (an
// early version served inline and spent three times the CPU on tar -x).
//
// What still goes over /dev/fuse, which the caller keeps serving: FORGET,
// INTERRUPT, requests made before the ring was ready, and notifications
// (the daemon's InodeNotify, EntryNotify: written to /dev/fuse), as well
// as passthrough backing-file registration (an ioctl on /dev/fuse).
//
// An INTERRUPT names a request the /dev/fuse server does not know when
// the ring serves it: the kernel is told EAGAIN and asks again until the
// request ends, so requests served through the ring are not interrupted.
//
// A queue serves up to Entries requests at once (one per entry); the
// kernel holds further requests until an entry is committed.
//
// The ring ends with the connection: at unmount (or abort) the kernel
// ends every entry (ENOTCONN, ECONNABORTED), and the queues stop, close
// their rings and unmap their buffers; Wait returns then.
package fuseuring
