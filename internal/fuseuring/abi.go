package fuseuring

// The FUSE-over-io_uring ABI of include/uapi/linux/fuse.h (protocol 7.42
// and later). abi_test.go checks sizes and offsets against the kernel's.

const (
	// inOutHeaderSize is FUSE_URING_IN_OUT_HEADER_SZ: room for the
	// fuse_in_header of a request or the fuse_out_header of its reply.
	inOutHeaderSize = 128
	// opInSize is FUSE_URING_OP_IN_OUT_SZ: room for a request's
	// per-opcode struct (the kernel's first in-argument).
	opInSize = 128

	// cmdRegister is FUSE_IO_URING_CMD_REGISTER: hand the kernel an
	// entry's buffers and wait for a request in them.
	cmdRegister = 1
	// cmdCommitAndFetch is FUSE_IO_URING_CMD_COMMIT_AND_FETCH: the reply
	// is in the entry's buffers; wait for the next request in them.
	cmdCommitAndFetch = 2

	// inHeaderSize and outHeaderSize are the sizes of fuse_in_header and
	// fuse_out_header.
	inHeaderSize  = 40
	outHeaderSize = 16
)

// entInOut is struct fuse_uring_ent_in_out.
type entInOut struct {
	Flags     uint64
	CommitID  uint64 // the request's unique, to be named in its commit
	PayloadSz uint32 // bytes in the payload buffer (either direction)
	Padding   uint32
	Reserved  uint64
}

// reqHeader is struct fuse_uring_req_header, the first buffer of an entry.
type reqHeader struct {
	InOut    [inOutHeaderSize]byte // fuse_in_header, then fuse_out_header
	OpIn     [opInSize]byte        // the request's per-opcode struct
	EntInOut entInOut
}

// cmdReq is struct fuse_uring_cmd_req, in the command area of an SQE128.
type cmdReq struct {
	Flags    uint64
	CommitID uint64
	QID      uint16
	Padding  [6]uint8
}
