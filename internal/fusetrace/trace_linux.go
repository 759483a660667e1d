package fusetrace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const tracefsDir = "/sys/kernel/tracing"

// Counter counts FUSE requests from Open to Close. Methods are safe for
// concurrent use (they only read the map).
type Counter struct {
	m       *ebpf.Map
	progs   []*ebpf.Program
	links   []link.Link
	names   map[uint32]string
	mounted bool // tracefs, by Open
}

// Open loads and attaches the counting programs (see the package doc).
// It needs root (CAP_BPF and CAP_PERFMON).
func Open() (_ *Counter, err error) {
	c := &Counter{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := c.tracefs(); err != nil {
		return nil, err
	}
	send, err := readFormat("fuse_request_send")
	if err != nil {
		return nil, err
	}
	end, err := readFormat("fuse_request_end")
	if err != nil {
		return nil, err
	}
	c.names = send.names
	c.m, err = ebpf.NewMap(&ebpf.MapSpec{Name: "fuse_reqs", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 1 << 14})
	if err != nil {
		return nil, fmt.Errorf("%w: BPF hash map: %w", ErrNotSupported, err)
	}
	for _, tp := range []struct {
		name string
		f    format
		op   bool
	}{{"fuse_request_send", send, true}, {"fuse_request_end", end, false}} {
		insns, err := program(c.m.FD(), tp.f, tp.op)
		if err != nil {
			return nil, err
		}
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "count_" + tp.name[len("fuse_request_"):], Type: ebpf.TracePoint, License: "GPL", Instructions: insns})
		if err != nil {
			return nil, fmt.Errorf("%w: load the %s program: %w", ErrNotSupported, tp.name, err)
		}
		c.progs = append(c.progs, p)
		l, err := link.Tracepoint("fuse", tp.name, p, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: attach to fuse/%s: %w", ErrNotSupported, tp.name, err)
		}
		c.links = append(c.links, l)
	}
	return c, nil
}

// tracefs mounts tracefs if it is not mounted (cilium/ebpf finds it through
// /proc/self/mountinfo).
func (c *Counter) tracefs() error {
	var st unix.Statfs_t
	if unix.Statfs(tracefsDir, &st) == nil && st.Type == unix.TRACEFS_MAGIC {
		return nil
	}
	if err := unix.Mount("nodev", tracefsDir, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("%w: mount tracefs at %s: %w", ErrNotSupported, tracefsDir, err)
	}
	c.mounted = true
	return nil
}

func readFormat(event string) (format, error) {
	b, err := os.ReadFile(filepath.Join(tracefsDir, "events", "fuse", event, "format"))
	if err != nil {
		return format{}, fmt.Errorf("%w: no fuse/%s tracepoint (Linux 6.15+): %w", ErrNotSupported, event, err)
	}
	return parseFormat(string(b))
}

// program is, in C:
//
//	u64 key = (u64)ctx->connection << 32 | (withOp ? ctx->opcode : 0), one = 1;
//	u64 *v = bpf_map_lookup_elem(&m, &key);
//	if (!v && bpf_map_update_elem(&m, &key, &one, BPF_NOEXIST) == 0)
//		return 0;
//	if (!v)	// another CPU made the entry first
//		v = bpf_map_lookup_elem(&m, &key);
//	if (v)
//		__sync_fetch_and_add(v, 1);
//	return 0;
func program(mapFD int, f format, withOp bool) (asm.Instructions, error) {
	conn, err := f.u32("connection")
	if err != nil {
		return nil, err
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, conn, asm.Word),
		asm.LSh.Imm(asm.R7, 32),
	}
	if withOp {
		op, err := f.u32("opcode")
		if err != nil {
			return nil, err
		}
		insns = append(insns,
			asm.LoadMem(asm.R8, asm.R6, op, asm.Word),
			asm.Or.Reg(asm.R7, asm.R8))
	}
	lookup := func(miss string) asm.Instructions {
		return asm.Instructions{
			asm.LoadMapPtr(asm.R1, mapFD),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, miss),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Ja.Label("out"),
		}
	}
	insns = append(insns, asm.StoreMem(asm.RFP, -8, asm.R7, asm.DWord))
	insns = append(insns, lookup("insert")...)
	insns = append(insns,
		asm.Mov.Imm(asm.R1, 1).WithSymbol("insert"),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, int32(ebpf.UpdateNoExist)),
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
	)
	insns = append(insns, lookup("out")...)
	insns = append(insns,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return())
	return insns, nil
}

// Counts returns the requests counted so far on the connection dev (see
// DevOf).
func (c *Counter) Counts(dev uint32) (Counts, error) {
	out := Counts{Ops: map[string]uint64{}}
	var k, v uint64
	it := c.m.Iterate()
	for it.Next(&k, &v) {
		if uint32(k>>32) != dev {
			continue
		}
		op := uint32(k)
		if op == 0 {
			out.Replies += v
			continue
		}
		name, ok := c.names[op]
		if !ok {
			name = fmt.Sprintf("OP_%d", op)
		}
		out.Ops[name] += v
	}
	if err := it.Err(); err != nil {
		return Counts{}, fmt.Errorf("read the FUSE request counts: %w", err)
	}
	return out, nil
}

// Close detaches the programs and frees the map; it unmounts tracefs if
// Open mounted it.
func (c *Counter) Close() error {
	var errs []error
	for _, l := range c.links {
		errs = append(errs, l.Close())
	}
	for _, p := range c.progs {
		errs = append(errs, p.Close())
	}
	if c.m != nil {
		errs = append(errs, c.m.Close())
	}
	if c.mounted {
		if err := unix.Unmount(tracefsDir, 0); err != nil {
			errs = append(errs, unix.Unmount(tracefsDir, unix.MNT_DETACH))
		}
	}
	c.links, c.progs, c.m, c.mounted = nil, nil, nil, false
	return errors.Join(errs...)
}

// DevOf returns the FUSE connection of the mount at path, as the
// tracepoints name it: the kernel's dev_t of its superblock (major << 20 |
// minor), not stat's encoding.
func DevOf(path string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return unix.Major(st.Dev)<<20 | unix.Minor(st.Dev), nil
}
