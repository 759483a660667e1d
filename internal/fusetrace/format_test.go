package fusetrace

import "testing"

// sendFormat is fuse_request_send's format file on Linux 6.18, shortened.
const sendFormat = `name: fuse_request_send
ID: 1293
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:dev_t connection;	offset:8;	size:4;	signed:0;
	field:uint64_t unique;	offset:16;	size:8;	signed:0;
	field:enum fuse_opcode opcode;	offset:24;	size:4;	signed:0;
	field:uint32_t len;	offset:28;	size:4;	signed:0;

print fmt: "connection %u req %llu opcode %u (%s) len %u ", REC->connection, REC->unique, REC->opcode, __print_symbolic(REC->opcode, {1, "FUSE_LOOKUP"}, {2, "FUSE_FORGET"}, {35, "FUSE_CREATE"}, {4096, "CUSE_INIT"}), REC->len
`

func TestParseFormat(t *testing.T) {
	f, err := parseFormat(sendFormat)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int16{"connection": 8, "opcode": 24, "len": 28} {
		got, err := f.u32(name)
		if err != nil || got != want {
			t.Errorf("u32(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	if _, err := f.u32("unique"); err == nil {
		t.Error("u32 of an 8-byte field: no error")
	}
	if _, err := f.u32("missing"); err == nil {
		t.Error("u32 of a missing field: no error")
	}
	for op, want := range map[uint32]string{1: "FUSE_LOOKUP", 35: "FUSE_CREATE", 4096: "CUSE_INIT"} {
		if got := f.names[op]; got != want {
			t.Errorf("names[%d] = %q, want %q", op, got, want)
		}
	}
	if len(f.names) != 4 {
		t.Errorf("%d names, want 4: %v", len(f.names), f.names)
	}
	if _, err := parseFormat("name: nothing\n"); err == nil {
		t.Error("a format without fields: no error")
	}
}

func TestCounts_Sub(t *testing.T) {
	old := Counts{Ops: map[string]uint64{"FUSE_LOOKUP": 3, "FUSE_STATFS": 1}, Replies: 4}
	now := Counts{Ops: map[string]uint64{"FUSE_LOOKUP": 5, "FUSE_STATFS": 1, "FUSE_CREATE": 2}, Replies: 8}
	d := now.Sub(old)
	if got, want := d.Requests(), uint64(4); got != want {
		t.Errorf("Requests = %d, want %d (%v)", got, want, d.Ops)
	}
	if d.Ops["FUSE_LOOKUP"] != 2 || d.Ops["FUSE_CREATE"] != 2 || d.Replies != 4 {
		t.Errorf("Sub = %+v", d)
	}
	if _, ok := d.Ops["FUSE_STATFS"]; ok {
		t.Errorf("an opcode with no new requests is listed: %v", d.Ops)
	}
}
