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
// in an entry's buffers; it is handed to a Handler (go-fuse's
// fuse.ProtocolServer parses and dispatches it), and the reply goes back
// in the same buffers with COMMIT_AND_FETCH, which also waits for the next
// request: one system call per request, no read and write of /dev/fuse.
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
// A queue serves its requests one at a time on its thread, as libfuse
// does: with Entries per queue, the kernel holds the next requests in the
// entries while one is served.
//
// The ring ends with the connection: at unmount (or abort) the kernel
// ends every entry (ENOTCONN, ECONNABORTED), and the queues stop, close
// their rings and unmap their buffers; Wait returns then.
package fuseuring
