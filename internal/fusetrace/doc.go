// Package fusetrace counts the FUSE requests the kernel sends, per
// connection (one per mount) and opcode, for benchmarks.
//
// It attaches two small BPF programs (built with cilium/ebpf's assembler, no
// compiler needed) to the kernel's fuse/fuse_request_send and
// fuse/fuse_request_end tracepoints (Linux 6.15+). Each adds one to a hash
// map entry keyed by (connection, opcode), or (connection, 0) for a reply;
// reading the counts walks the map. That costs a map update per request in
// the kernel and nothing in user space, and nothing is lost when requests
// come faster than a reader could drain a ring buffer.
//
// The programs are attached through perf-event file descriptors: they are
// detached when Close closes them, and by the kernel when the process exits
// for any reason, so a killed benchmark leaves nothing attached. If tracefs
// is not mounted, Open mounts it at /sys/kernel/tracing and Close unmounts it.
//
// What is counted: every request that goes through fuse_request_send, on
// /dev/fuse and on FUSE over io_uring alike. FORGET and BATCH_FORGET are
// queued without it and are not counted; INTERRUPT neither. Replies counts
// fuse_request_end, every request that got a reply or was aborted: where it
// exceeds the sum of the requests, requests went out without passing the send
// tracepoint.
package fusetrace
