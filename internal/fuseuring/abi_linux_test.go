package fuseuring

import (
	"testing"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The layouts of include/uapi/linux/fuse.h (7.42+) and
// include/uapi/linux/io_uring.h, written out here from the headers.
func TestABI_Layout(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(struct fuse_uring_ent_in_out)", unsafe.Sizeof(entInOut{}), 32},
		{"fuse_uring_ent_in_out.flags", unsafe.Offsetof(entInOut{}.Flags), 0},
		{"fuse_uring_ent_in_out.commit_id", unsafe.Offsetof(entInOut{}.CommitID), 8},
		{"fuse_uring_ent_in_out.payload_sz", unsafe.Offsetof(entInOut{}.PayloadSz), 16},
		{"fuse_uring_ent_in_out.padding", unsafe.Offsetof(entInOut{}.Padding), 20},
		{"fuse_uring_ent_in_out.reserved", unsafe.Offsetof(entInOut{}.Reserved), 24},

		{"sizeof(struct fuse_uring_req_header)", unsafe.Sizeof(reqHeader{}), 288},
		{"fuse_uring_req_header.in_out", unsafe.Offsetof(reqHeader{}.InOut), 0},
		{"fuse_uring_req_header.op_in", unsafe.Offsetof(reqHeader{}.OpIn), 128},
		{"fuse_uring_req_header.ring_ent_in_out", unsafe.Offsetof(reqHeader{}.EntInOut), 256},

		{"sizeof(struct fuse_uring_cmd_req)", unsafe.Sizeof(cmdReq{}), 24},
		{"fuse_uring_cmd_req.flags", unsafe.Offsetof(cmdReq{}.Flags), 0},
		{"fuse_uring_cmd_req.commit_id", unsafe.Offsetof(cmdReq{}.CommitID), 8},
		{"fuse_uring_cmd_req.qid", unsafe.Offsetof(cmdReq{}.QID), 16},
		{"fuse_uring_cmd_req.padding", unsafe.Offsetof(cmdReq{}.Padding), 18},

		{"sizeof(struct fuse_in_header)", inHeaderSize, unsafe.Sizeof(fuse.InHeader{})},
		{"sizeof(struct fuse_out_header)", outHeaderSize, unsafe.Sizeof(fuse.OutHeader{})},

		{"sizeof(struct io_uring_sqe) with SQE128", unsafe.Sizeof(sqe{}), 128},
		{"io_uring_sqe.opcode", unsafe.Offsetof(sqe{}.Opcode), 0},
		{"io_uring_sqe.flags", unsafe.Offsetof(sqe{}.Flags), 1},
		{"io_uring_sqe.ioprio", unsafe.Offsetof(sqe{}.Ioprio), 2},
		{"io_uring_sqe.fd", unsafe.Offsetof(sqe{}.Fd), 4},
		{"io_uring_sqe.off (cmd_op)", unsafe.Offsetof(sqe{}.Off), 8},
		{"io_uring_sqe.addr", unsafe.Offsetof(sqe{}.Addr), 16},
		{"io_uring_sqe.len", unsafe.Offsetof(sqe{}.Len), 24},
		{"io_uring_sqe.rw_flags", unsafe.Offsetof(sqe{}.OpFlags), 28},
		{"io_uring_sqe.user_data", unsafe.Offsetof(sqe{}.UserData), 32},
		{"io_uring_sqe.buf_index", unsafe.Offsetof(sqe{}.BufIndex), 40},
		{"io_uring_sqe.personality", unsafe.Offsetof(sqe{}.Personality), 42},
		{"io_uring_sqe.file_index", unsafe.Offsetof(sqe{}.FileIndex), 44},
		{"io_uring_sqe.cmd", unsafe.Offsetof(sqe{}.Cmd), 48},

		{"sizeof(struct io_uring_cqe)", unsafe.Sizeof(cqe{}), cqeSize},
		{"io_uring_cqe.res", unsafe.Offsetof(cqe{}.Res), 8},
		{"io_uring_cqe.flags", unsafe.Offsetof(cqe{}.Flags), 12},

		{"sizeof(struct io_sqring_offsets)", unsafe.Sizeof(sqOffsets{}), 40},
		{"io_sqring_offsets.array", unsafe.Offsetof(sqOffsets{}.Array), 24},
		{"io_sqring_offsets.user_addr", unsafe.Offsetof(sqOffsets{}.UserAddr), 32},
		{"sizeof(struct io_cqring_offsets)", unsafe.Sizeof(cqOffsets{}), 40},
		{"io_cqring_offsets.cqes", unsafe.Offsetof(cqOffsets{}.CQEs), 20},
		{"sizeof(struct io_uring_params)", unsafe.Sizeof(params{}), 120},
		{"io_uring_params.features", unsafe.Offsetof(params{}.Features), 20},
		{"io_uring_params.sq_off", unsafe.Offsetof(params{}.SQOff), 40},
		{"io_uring_params.cq_off", unsafe.Offsetof(params{}.CQOff), 80},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	// The fuse_uring_cmd_req must fit the SQE128 command area (80 bytes).
	if unsafe.Sizeof(cmdReq{}) > unsafe.Sizeof(sqe{}.Cmd) {
		t.Errorf("fuse_uring_cmd_req (%d bytes) does not fit the command area (%d)", unsafe.Sizeof(cmdReq{}), unsafe.Sizeof(sqe{}.Cmd))
	}
	// FUSE_OVER_IO_URING is bit 41 of the INIT flags (flags2 bit 9).
	if fuse.CAP_OVER_IO_URING != 1<<41 {
		t.Errorf("FUSE_OVER_IO_URING = %#x, want 1<<41", uint64(fuse.CAP_OVER_IO_URING))
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"FUSE_IO_URING_CMD_REGISTER", cmdRegister, 1},
		{"FUSE_IO_URING_CMD_COMMIT_AND_FETCH", cmdCommitAndFetch, 2},
		{"FUSE_URING_IN_OUT_HEADER_SZ", inOutHeaderSize, 128},
		{"FUSE_URING_OP_IN_OUT_SZ", opInSize, 128},
		{"IORING_OP_URING_CMD", opURingCmd, 46},
		{"IORING_OP_POLL_ADD", opPollAdd, 6},
		{"IORING_SETUP_SQE128", setupSQE128, 1 << 10},
		{"IORING_SETUP_SINGLE_ISSUER", setupSingleIssuer, 1 << 12},
		{"IORING_SETUP_DEFER_TASKRUN", setupDeferTaskrun, 1 << 13},
		{"IORING_OFF_CQ_RING", offCQRing, 0x8000000},
		{"IORING_OFF_SQES", offSQEs, 0x10000000},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}
