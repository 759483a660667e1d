package journal_test

// Crash tests: a child process (this test binary, re-executed with
// CAIRN_CRASH_CHILD set) runs a random workload against a journal and is
// killed with SIGKILL at a random moment; the parent reopens the journal and
// checks the durability contract (doc.go):
//
//   - it opens, and its invariants hold (link counts, every name resolves,
//     every file reads exactly its size, no directory under two parents, the
//     quota counters match the tree);
//   - every operation the child saw return is in it: the child logs
//     "begin K" before and "ack K" after each operation to an append-only
//     file (one write(2) per line; the page cache keeps it across kill -9),
//     and the parent replays the acknowledged operations into an in-memory
//     model. The state must equal the model, or the model plus the one
//     operation that was in flight;
//   - every acknowledged snapshot is in the store and holds exactly the
//     model's state at that point; the ref points at the last acknowledged
//     head, or at one an in-flight snapshot or rollback moved it to; a new
//     snapshot after reopening succeeds.
//
// The next cycle continues from the reopened state. A few hundred cycles run
// by default (-short: fewer); -journal.crash.cycles=N or CAIRN_CRASH_CYCLES
// runs more, -journal.crash.seed=S replays a seed's workload (the kill
// moments are timing and vary). A failure keeps the store, the journal and
// the logs in a directory it names. The only state outside "before or after
// the operation in flight" it accepts is a torn write (crashTornWrite).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/journal"
)

var (
	crashCyclesFlag = flag.Int("journal.crash.cycles", 0, "crash test: kill/reopen cycles (default 200, 30 with -short; env CAIRN_CRASH_CYCLES)")
	crashSeedFlag   = flag.Int64("journal.crash.seed", 0, "crash test: seed of the workload (0: random)")
)

const (
	crashChildEnv = "CAIRN_CRASH_CHILD" // the child's work directory
	crashWS       = "crash"
	// Quotas far above what the workload uses: StatFs then reports the
	// journal's counters, which the parent checks against the tree.
	crashMaxInodes = 1 << 40
	crashMaxBytes  = 1 << 50
	// crashGeneration is how many cycles share one store and journal
	// before starting afresh (bounds the store's index files).
	crashGeneration = 250
	crashMaxFile    = 512 << 10 // bytes in one file of the workload
	crashMaxTotal   = 3 << 20   // bytes in all files, above which writes do not grow files
	crashMaxEntries = 120       // names above which the workload removes more than it adds
	crashKeepSnaps  = 8         // rollback targets carried from cycle to cycle
)

// A write killed in flight may be torn: the kernel stops a pwrite between
// pages when SIGKILL arrives, so part of its bytes may have landed. That is
// allowed (no filesystem makes an unacknowledged write atomic): the file's
// metadata is as before or as after the write, every byte is the old or the
// new one, and what reads show is what the next snapshot holds (the parent
// adopts the observed state as its model and snapshots it).

func crashConfig(dir string, st *chunkstore.Store) journal.Config {
	return journal.Config{Dir: dir, Store: st, Workspace: crashWS, MaxInodes: crashMaxInodes, MaxBytes: crashMaxBytes}
}

// ---- the model -----------------------------------------------------------

// crashNode is one inode of the model. Hard links are one *crashNode under several
// names.
type crashNode struct {
	Type   journal.Type
	Mode   uint32
	Data   []byte                // regular files
	Target string                // symlinks
	Xattrs map[string]string     // nil: none
	Kids   map[string]*crashNode // directories
}

func crashNewDir(mode uint32) *crashNode {
	return &crashNode{Type: journal.TypeDir, Mode: mode, Kids: map[string]*crashNode{}}
}

// clone copies a tree deeply, keeping hard links shared.
func (n *crashNode) clone() *crashNode { return n.cloneMemo(map[*crashNode]*crashNode{}) }

func (n *crashNode) cloneMemo(memo map[*crashNode]*crashNode) *crashNode {
	if c, ok := memo[n]; ok {
		return c
	}
	c := &crashNode{Type: n.Type, Mode: n.Mode, Data: slices.Clone(n.Data), Target: n.Target}
	memo[n] = c
	if n.Xattrs != nil {
		c.Xattrs = make(map[string]string, len(n.Xattrs))
		for k, v := range n.Xattrs {
			c.Xattrs[k] = v
		}
	}
	if n.Kids != nil {
		c.Kids = make(map[string]*crashNode, len(n.Kids))
		for k, v := range n.Kids {
			c.Kids[k] = v.cloneMemo(memo)
		}
	}
	return c
}

func crashSplit(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	dir, name = p[:i], p[i+1:]
	if dir == "" {
		dir = "/"
	}
	return dir, name
}

func crashJoin(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// crashInside reports whether path p is dir or below it.
func crashInside(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func (n *crashNode) get(p string) *crashNode {
	if p == "/" {
		return n
	}
	for _, c := range strings.Split(p[1:], "/") {
		if n == nil || n.Type != journal.TypeDir {
			return nil
		}
		n = n.Kids[c]
	}
	return n
}

// crashOp is one line of the child's log: an operation ("begin"), its
// completion ("ack", with the snapshot ID a snapshot or rollback returned),
// or the child's failure ("err").
type crashOp struct {
	K     int64  `json:"k"`
	Ev    string `json:"ev"`
	Op    string `json:"op,omitempty"`
	P     string `json:"p,omitempty"`
	Q     string `json:"q,omitempty"`
	Off   int64  `json:"off,omitempty"`
	N     int64  `json:"n,omitempty"`
	Name  string `json:"name,omitempty"`
	Val   string `json:"val,omitempty"`
	Mode  uint32 `json:"mode,omitempty"`
	Flags uint32 `json:"flags,omitempty"`
	To    string `json:"to,omitempty"` // rollback target
	ID    string `json:"id,omitempty"` // ack: snapshot taken (snap), or discarded state (rollback)
	Err   string `json:"err,omitempty"`
}

func (op *crashOp) String() string {
	b, _ := json.Marshal(op)
	return string(b)
}

// crashData is the content operation k writes: n bytes determined by k.
func crashData(k, n int64) []byte {
	b := make([]byte, n)
	x := uint64(k)*0x9E3779B97F4A7C15 | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x >> 24)
	}
	return b
}

func crashResize(b []byte, n int64) []byte {
	if int64(len(b)) >= n {
		return b[:n]
	}
	return append(b, make([]byte, n-int64(len(b)))...)
}

// crashApply applies a namespace or data operation to the model with the
// journal's semantics. Snapshots and rollbacks are handled by the caller.
func crashApply(root *crashNode, op *crashOp) error {
	bad := func(why string) error { return fmt.Errorf("model: %s: %s", op, why) }
	switch op.Op {
	case "create", "mkdir", "symlink":
		dir, name := crashSplit(op.P)
		d := root.get(dir)
		if d == nil || d.Type != journal.TypeDir || d.Kids[name] != nil {
			return bad("bad parent or name exists")
		}
		switch op.Op {
		case "create":
			d.Kids[name] = &crashNode{Type: journal.TypeRegular, Mode: 0o644}
		case "mkdir":
			d.Kids[name] = crashNewDir(0o755)
		case "symlink":
			d.Kids[name] = &crashNode{Type: journal.TypeSymlink, Mode: 0o777, Target: op.Val}
		}
	case "write", "trunc":
		n := root.get(op.P)
		if n == nil || n.Type != journal.TypeRegular {
			return bad("not a regular file")
		}
		if op.Op == "trunc" {
			n.Data = crashResize(n.Data, op.N)
			break
		}
		if end := op.Off + op.N; end > int64(len(n.Data)) {
			n.Data = crashResize(n.Data, end)
		}
		copy(n.Data[op.Off:], crashData(op.K, op.N))
	case "chmod":
		n := root.get(op.P)
		if n == nil {
			return bad("no such path")
		}
		n.Mode = op.Mode
	case "setx", "rmx":
		n := root.get(op.P)
		if n == nil {
			return bad("no such path")
		}
		if op.Op == "setx" {
			if n.Xattrs == nil {
				n.Xattrs = map[string]string{}
			}
			n.Xattrs[op.Name] = op.Val
			break
		}
		if _, ok := n.Xattrs[op.Name]; !ok {
			return bad("no such xattr")
		}
		delete(n.Xattrs, op.Name)
	case "unlink", "rmdir":
		dir, name := crashSplit(op.P)
		d := root.get(dir)
		if d == nil || d.Type != journal.TypeDir || d.Kids[name] == nil {
			return bad("no such path")
		}
		n := d.Kids[name]
		if (n.Type == journal.TypeDir) != (op.Op == "rmdir") || (n.Type == journal.TypeDir && len(n.Kids) > 0) {
			return bad("wrong type or not empty")
		}
		delete(d.Kids, name)
	case "link":
		n := root.get(op.P)
		dir, name := crashSplit(op.Q)
		d := root.get(dir)
		if n == nil || n.Type == journal.TypeDir || d == nil || d.Type != journal.TypeDir || d.Kids[name] != nil {
			return bad("bad source or target")
		}
		d.Kids[name] = n
	case "rename":
		return crashRename(root, op)
	case "fsync":
	default:
		return bad("unknown operation")
	}
	return nil
}

// crashRename is Rename's semantics (renameat2).
func crashRename(root *crashNode, op *crashOp) error {
	bad := func(why string) error { return fmt.Errorf("model: %s: %s", op, why) }
	sd, sname := crashSplit(op.P)
	dd, dname := crashSplit(op.Q)
	sp, dp := root.get(sd), root.get(dd)
	if sp == nil || dp == nil || sp.Type != journal.TypeDir || dp.Type != journal.TypeDir || sp.Kids[sname] == nil {
		return bad("no source or target directory")
	}
	src, dst := sp.Kids[sname], dp.Kids[dname]
	flags := journal.RenameFlags(op.Flags)
	switch {
	case flags&journal.RenameExchange != 0 && dst == nil:
		return bad("exchange with nothing")
	case flags&journal.RenameNoReplace != 0 && dst != nil:
		return bad("target exists")
	case dst == src:
		return nil // two names of one inode: nothing happens
	}
	if src.Type == journal.TypeDir && dd != sd && crashInside(dd, op.P) {
		return bad("directory into its own subtree")
	}
	if flags&journal.RenameExchange != 0 {
		if dst.Type == journal.TypeDir && dd != sd && crashInside(sd, op.Q) {
			return bad("directory into its own subtree")
		}
		sp.Kids[sname], dp.Kids[dname] = dst, src
		return nil
	}
	if dst != nil {
		switch {
		case (src.Type == journal.TypeDir) != (dst.Type == journal.TypeDir):
			return bad("type mismatch")
		case dst.Type == journal.TypeDir && len(dst.Kids) > 0:
			return bad("target not empty")
		}
	}
	delete(sp.Kids, sname)
	dp.Kids[dname] = src
	return nil
}

type crashEntry struct {
	path string
	n    *crashNode
}

// entries lists every name below the root, depth first, in name order.
func (n *crashNode) entries() []crashEntry {
	var out []crashEntry
	var walk func(d *crashNode, p string)
	walk = func(d *crashNode, p string) {
		names := make([]string, 0, len(d.Kids))
		for k := range d.Kids {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			c := d.Kids[k]
			cp := crashJoin(p, k)
			out = append(out, crashEntry{cp, c})
			if c.Type == journal.TypeDir {
				walk(c, cp)
			}
		}
	}
	walk(n, "/")
	return out
}

// crashCanon describes a tree as path -> description, hard links named by all
// their paths, so that two trees are equal iff their descriptions are.
func crashCanon(root *crashNode) map[string]string {
	ents := append([]crashEntry{{"/", root}}, root.entries()...)
	links := map[*crashNode][]string{}
	for _, e := range ents {
		if e.n.Type != journal.TypeDir {
			links[e.n] = append(links[e.n], e.path)
		}
	}
	out := make(map[string]string, len(ents))
	for _, e := range ents {
		n := e.n
		var b strings.Builder
		fmt.Fprintf(&b, "%v %04o", n.Type, n.Mode)
		switch n.Type {
		case journal.TypeRegular:
			sum := sha256.Sum256(n.Data)
			fmt.Fprintf(&b, " %dB %s", len(n.Data), hex.EncodeToString(sum[:6]))
		case journal.TypeSymlink:
			fmt.Fprintf(&b, " -> %s", n.Target)
		}
		xs := make([]string, 0, len(n.Xattrs))
		for k, v := range n.Xattrs {
			xs = append(xs, k+"="+v)
		}
		sort.Strings(xs)
		for _, x := range xs {
			b.WriteString(" " + x)
		}
		if l := links[n]; len(l) > 1 {
			b.WriteString(" links=" + strings.Join(l, ","))
		}
		out[e.path] = b.String()
	}
	return out
}

// crashCanonDiff describes how got differs from want (at most max lines).
func crashCanonDiff(want, got map[string]string, max int) string {
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var ks []string
	for k := range keys {
		if want[k] != got[k] {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i == max {
			fmt.Fprintf(&b, "\t... %d more\n", len(ks)-max)
			break
		}
		w, g := want[k], got[k]
		if w == "" {
			w = "(absent)"
		}
		if g == "" {
			g = "(absent)"
		}
		fmt.Fprintf(&b, "\t%s:\n\t\twant %s\n\t\tgot  %s\n", k, w, g)
	}
	return b.String()
}

func crashCanonString(m map[string]string) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%s\t%s\n", k, m[k])
	}
	return b.String()
}

// ---- reading a journal and a snapshot into the model ---------------------

// crashTree is a journal's or a snapshot's state as a model, with the
// invariant violations found while reading it.
type crashTree struct {
	root     *crashNode
	inodes   uint64 // distinct inodes, the root included
	bytes    uint64 // size of the distinct regular files
	files    uint64
	dirs     uint64 // the root excluded
	symlinks uint64
	problems []string
}

func (t *crashTree) problem(format string, args ...any) {
	t.problems = append(t.problems, fmt.Sprintf(format, args...))
}

// crashDump walks a journal from its root through ReadDir, Lookup, GetAttr,
// Read, Readlink and the xattr calls, checking its invariants. An error is
// an operation that failed.
func crashDump(ctx context.Context, j *journal.Journal) (*crashTree, error) {
	t := &crashTree{}
	dirs := map[journal.Ino]string{}
	others := map[journal.Ino]*crashNode{}
	attrs := map[journal.Ino]journal.Attr{}
	names := map[journal.Ino][]string{}

	xattrs := func(ino journal.Ino, p string) (map[string]string, error) {
		xs, err := j.ListXattr(ctx, ino)
		if err != nil {
			return nil, fmt.Errorf("ListXattr %s (inode %d): %w", p, ino, err)
		}
		if len(xs) == 0 {
			return nil, nil
		}
		m := map[string]string{}
		for _, x := range xs {
			v, err := j.GetXattr(ctx, ino, x)
			if err != nil {
				return nil, fmt.Errorf("GetXattr %s %q: %w", p, x, err)
			}
			m[x] = string(v)
		}
		return m, nil
	}
	leaf := func(a journal.Attr, p string) (*crashNode, error) {
		n := &crashNode{Type: a.Type, Mode: a.Mode}
		switch a.Type {
		case journal.TypeRegular:
			n.Data = make([]byte, a.Size)
			for off := 0; off < len(n.Data); {
				k, err := j.Read(ctx, a.Ino, n.Data[off:min(len(n.Data), off+64<<10)], int64(off))
				if err != nil {
					return nil, fmt.Errorf("Read %s (inode %d) at %d of %d: %w", p, a.Ino, off, a.Size, err)
				}
				if k == 0 {
					t.problem("%s (inode %d): Read returns 0 bytes at %d, its size is %d", p, a.Ino, off, a.Size)
					break
				}
				off += k
			}
			var one [1]byte
			if k, err := j.Read(ctx, a.Ino, one[:], int64(a.Size)); k != 0 || err != nil {
				t.problem("%s (inode %d): Read at its size %d returns %d, %v", p, a.Ino, a.Size, k, err)
			}
			t.bytes += a.Size
			t.files++
		case journal.TypeSymlink:
			target, err := j.Readlink(ctx, a.Ino)
			if err != nil {
				return nil, fmt.Errorf("Readlink %s (inode %d): %w", p, a.Ino, err)
			}
			if uint64(len(target)) != a.Size {
				t.problem("%s (inode %d): symlink of size %d to %q", p, a.Ino, a.Size, target)
			}
			n.Target = target
			t.symlinks++
		default:
			t.problem("%s (inode %d): unexpected type %v", p, a.Ino, a.Type)
		}
		var err error
		n.Xattrs, err = xattrs(a.Ino, p)
		return n, err
	}
	var dir func(a journal.Attr, p string) (*crashNode, error)
	dir = func(a journal.Attr, p string) (*crashNode, error) {
		if prev, ok := dirs[a.Ino]; ok {
			t.problem("directory inode %d is both %s and %s", a.Ino, prev, p)
			return crashNewDir(a.Mode), nil
		}
		dirs[a.Ino] = p
		n := crashNewDir(a.Mode)
		var err error
		if n.Xattrs, err = xattrs(a.Ino, p); err != nil {
			return nil, err
		}
		ents, err := j.ReadDir(ctx, a.Ino)
		if err != nil {
			return nil, fmt.Errorf("ReadDir %s (inode %d): %w", p, a.Ino, err)
		}
		subdirs := uint32(0)
		for i, e := range ents {
			cp := crashJoin(p, e.Name)
			if i > 0 && ents[i-1].Name >= e.Name {
				t.problem("ReadDir %s: %q after %q", p, e.Name, ents[i-1].Name)
			}
			la, err := j.Lookup(ctx, a.Ino, e.Name)
			if err != nil {
				t.problem("ReadDir %s lists %q (inode %d), Lookup fails: %v", p, e.Name, e.Ino, err)
				continue
			}
			if la.Ino != e.Ino || la.Type != e.Type {
				t.problem("%s: ReadDir says inode %d %v, Lookup %d %v", cp, e.Ino, e.Type, la.Ino, la.Type)
			}
			ga, err := j.GetAttr(ctx, la.Ino)
			if err != nil {
				t.problem("%s: Lookup finds inode %d, GetAttr fails: %v", cp, la.Ino, err)
				continue
			}
			if ga != la {
				t.problem("%s: Lookup says %+v, GetAttr %+v", cp, la, ga)
			}
			if la.Ino == journal.RootIno {
				t.problem("%s is the root inode", cp)
				continue
			}
			if la.Type == journal.TypeDir {
				subdirs++
				c, err := dir(la, cp)
				if err != nil {
					return nil, err
				}
				n.Kids[e.Name] = c
				continue
			}
			if _, ok := dirs[la.Ino]; ok {
				t.problem("%s: inode %d is a directory elsewhere", cp, la.Ino)
			}
			names[la.Ino] = append(names[la.Ino], cp)
			if c, ok := others[la.Ino]; ok {
				if prev := attrs[la.Ino]; prev != la {
					t.problem("%s: inode %d has attributes %+v here, %+v at %s", cp, la.Ino, la, prev, names[la.Ino][0])
				}
				n.Kids[e.Name] = c
				continue
			}
			c, err := leaf(la, cp)
			if err != nil {
				return nil, err
			}
			others[la.Ino], attrs[la.Ino] = c, la
			n.Kids[e.Name] = c
		}
		if a.Nlink != 2+subdirs {
			t.problem("directory %s (inode %d): nlink %d, %d subdirectories", p, a.Ino, a.Nlink, subdirs)
		}
		return n, nil
	}
	ra, err := j.GetAttr(ctx, journal.RootIno)
	if err != nil {
		return nil, fmt.Errorf("GetAttr of the root: %w", err)
	}
	if ra.Type != journal.TypeDir {
		t.problem("the root is a %v", ra.Type)
	}
	if t.root, err = dir(ra, "/"); err != nil {
		return nil, err
	}
	for ino, ns := range names {
		if a := attrs[ino]; a.Nlink != uint32(len(ns)) {
			t.problem("inode %d: nlink %d, names %v", ino, a.Nlink, ns)
		}
	}
	t.dirs = uint64(len(dirs) - 1)
	t.inodes = uint64(len(dirs) + len(others))
	return t, nil
}

// crashCheckCounters compares the journal's counters (through StatFs, with
// the quotas set) with the tree.
func crashCheckCounters(ctx context.Context, j *journal.Journal, t *crashTree) {
	st, err := j.StatFs(ctx)
	if err != nil {
		t.problem("StatFs: %v", err)
		return
	}
	if got := st.Files - st.Ffree; got != t.inodes {
		t.problem("StatFs: %d inodes used, the tree has %d", got, t.inodes)
	}
	if want := (crashMaxBytes - t.bytes) / uint64(st.Bsize); st.Bfree != want {
		t.problem("StatFs: %d blocks free, the tree's %d bytes leave %d", st.Bfree, t.bytes, want)
	}
}

// crashSnapDump reads a snapshot from the store into the model, checking
// link counts and its statistics.
func crashSnapDump(ctx context.Context, st *chunkstore.Store, id chunkstore.ID) (*crashTree, *chunkstore.Snapshot, error) {
	snap, err := st.Snapshot(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	t := &crashTree{}
	type other struct {
		n     *crashNode
		e     chunkstore.Entry
		names int
	}
	others := map[uint64]*other{}
	xmap := func(xs []chunkstore.Xattr) map[string]string {
		if len(xs) == 0 {
			return nil
		}
		m := map[string]string{}
		for _, x := range xs {
			m[x.Name] = string(x.Value)
		}
		return m
	}
	var dir func(tree chunkstore.ID, n *crashNode, p string) (uint32, error)
	dir = func(tree chunkstore.ID, n *crashNode, p string) (uint32, error) {
		tr, err := st.Tree(ctx, tree)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		subdirs := uint32(0)
		for _, e := range tr.Entries {
			cp := crashJoin(p, e.Name)
			if e.Type == chunkstore.TypeDir {
				subdirs++
				t.dirs++
				c := crashNewDir(e.Mode)
				c.Xattrs = xmap(e.Xattrs)
				k, err := dir(e.Subtree, c, cp)
				if err != nil {
					return 0, err
				}
				if e.Nlink != 2+k {
					t.problem("snapshot %s: directory %s has nlink %d, %d subdirectories", id.Short(), cp, e.Nlink, k)
				}
				n.Kids[e.Name] = c
				continue
			}
			if o, ok := others[e.Ino]; ok {
				o.names++
				n.Kids[e.Name] = o.n
				continue
			}
			c := &crashNode{Type: e.Type, Mode: e.Mode, Target: e.Target, Xattrs: xmap(e.Xattrs)}
			switch e.Type {
			case chunkstore.TypeRegular:
				t.files++
				t.bytes += e.Size
				switch {
				case len(e.Inline) > 0:
					c.Data = slices.Clone(e.Inline)
				case e.Size > 0:
					r, err := st.OpenFile(ctx, chunkstore.FileContent{Size: e.Size, Chunks: e.Chunks, ChunkLists: e.ChunkLists})
					if err != nil {
						return 0, fmt.Errorf("%s: %w", cp, err)
					}
					c.Data = make([]byte, e.Size)
					if k, err := r.ReadAt(c.Data, 0); k != len(c.Data) {
						return 0, fmt.Errorf("%s: read %d of %d bytes: %v", cp, k, e.Size, err)
					}
				}
				if uint64(len(c.Data)) != e.Size {
					t.problem("snapshot %s: %s has size %d, content of %d bytes", id.Short(), cp, e.Size, len(c.Data))
				}
			case chunkstore.TypeSymlink:
				t.symlinks++
			}
			others[e.Ino] = &other{n: c, e: e, names: 1}
			n.Kids[e.Name] = c
		}
		return subdirs, nil
	}
	t.root = crashNewDir(snap.RootAttr.Mode)
	t.root.Xattrs = xmap(snap.RootAttr.Xattrs)
	if _, err := dir(snap.Root, t.root, "/"); err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", id.Short(), err)
	}
	for ino, o := range others {
		if o.e.Nlink != uint32(o.names) {
			t.problem("snapshot %s: inode %d (%s) has nlink %d, %d names", id.Short(), ino, o.e.Name, o.e.Nlink, o.names)
		}
	}
	s := snap.Stats
	// Stats.Dirs: chunkstore documents "including the root"; the journal
	// records its own count, which excludes it. Accept either here.
	if s.Files != t.files || s.Symlinks != t.symlinks || s.Bytes != t.bytes || (s.Dirs != t.dirs && s.Dirs != t.dirs+1) {
		t.problem("snapshot %s: stats say %d files, %d dirs, %d symlinks, %d bytes; the trees hold %d, %d (+ the root), %d, %d",
			id.Short(), s.Files, s.Dirs, s.Symlinks, s.Bytes, t.files, t.dirs, t.symlinks, t.bytes)
	}
	return t, snap, nil
}

// ---- the child -------------------------------------------------------------

// crashState is what the parent tells the child.
type crashState struct {
	Cycle int      `json:"cycle"`
	Seed  int64    `json:"seed"`
	NextK int64    `json:"next_k"` // number of the child's first operation
	Snaps []string `json:"snaps"`  // snapshots to roll back to
	Log   string   `json:"log"`
	Store string   `json:"store"`
	Dir   string   `json:"dir"` // the journal
}

// TestCrashChild is the child process of TestCrash; it does nothing unless
// started by it.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("the child process of TestCrash")
	}
	crashChild(dir) // never returns
}

type crashChildRun struct {
	ctx   context.Context
	j     *journal.Journal
	log   *os.File
	rng   *rand.Rand
	m     *crashNode
	snaps []chunkstore.ID
	k     int64
}

func crashChild(dir string) {
	ctx := context.Background()
	var s crashState
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err == nil {
		err = json.Unmarshal(data, &s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	logf, err := os.OpenFile(s.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	c := &crashChildRun{ctx: ctx, log: logf, rng: rand.New(rand.NewSource(s.Seed)), k: s.NextK}
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		fmt.Fprintln(os.Stderr, "crash child:", msg)
		c.write(&crashOp{K: c.k, Ev: "err", Err: msg})
		os.Exit(3)
	}
	for _, x := range s.Snaps {
		id, err := chunkstore.ParseID(x)
		if err != nil {
			fail("state: %v", err)
		}
		c.snaps = append(c.snaps, id)
	}
	be, err := local.Open(s.Store, local.Options{})
	if err != nil {
		fail("open backend: %v", err)
	}
	st, err := chunkstore.Open(ctx, be, chunkstore.Options{})
	if err != nil {
		fail("open store: %v", err)
	}
	if c.j, err = journal.Open(ctx, crashConfig(s.Dir, st)); err != nil {
		fail("open journal: %v", err)
	}
	if err := c.reload(); err != nil {
		fail("%v", err)
	}
	ready := os.NewFile(3, "ready")
	ready.Write([]byte{'r'})
	ready.Close()

	budget := 200 + c.rng.Intn(3000)
	for range budget {
		op := c.pick()
		c.write(&op)
		id, err := c.do(&op)
		if err != nil {
			fail("%s: %v", op.String(), err)
		}
		c.write(&crashOp{K: op.K, Ev: "ack", ID: id})
		switch op.Op {
		case "snap":
			sid, _ := chunkstore.ParseID(id)
			c.snaps = append(c.snaps, sid)
		case "rollback":
			sid, _ := chunkstore.ParseID(id)
			c.snaps = append(c.snaps, sid)
			if err := c.reload(); err != nil {
				fail("after %s: %v", op.String(), err)
			}
		default:
			if err := crashApply(c.m, &op); err != nil {
				fail("%v", err)
			}
		}
		c.k++
	}
	time.Sleep(time.Hour) // until killed
	os.Exit(0)
}

// write appends one line to the log with one write(2).
func (c *crashChildRun) write(op *crashOp) {
	b, _ := json.Marshal(op)
	if _, err := c.log.Write(append(b, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "crash child: log:", err)
		os.Exit(2)
	}
}

// reload reads the journal's state into the child's model.
func (c *crashChildRun) reload() error {
	t, err := crashDump(c.ctx, c.j)
	if err != nil {
		return err
	}
	if len(t.problems) > 0 {
		return fmt.Errorf("journal inconsistent: %s", strings.Join(t.problems, "; "))
	}
	c.m = t.root
	return nil
}

func (c *crashChildRun) resolve(p string) (journal.Ino, error) {
	ino := journal.RootIno
	if p == "/" {
		return ino, nil
	}
	for _, name := range strings.Split(p[1:], "/") {
		a, err := c.j.Lookup(c.ctx, ino, name)
		if err != nil {
			return 0, fmt.Errorf("lookup %s: %w", p, err)
		}
		ino = a.Ino
	}
	return ino, nil
}

func (c *crashChildRun) resolveParent(p string) (journal.Ino, string, error) {
	dir, name := crashSplit(p)
	ino, err := c.resolve(dir)
	return ino, name, err
}

// do runs op against the journal; for snapshots and rollbacks it returns
// the snapshot ID to log.
func (c *crashChildRun) do(op *crashOp) (string, error) {
	ctx, j, r := c.ctx, c.j, journal.Root
	switch op.Op {
	case "snap":
		id, err := j.Snapshot(ctx, journal.SnapshotOptions{Message: fmt.Sprintf("op %d", op.K)})
		return id.String(), err
	case "rollback":
		to, err := chunkstore.ParseID(op.To)
		if err != nil {
			return "", err
		}
		id, err := j.Rollback(ctx, to, true)
		return id.String(), err
	case "create", "mkdir", "symlink":
		pino, name, err := c.resolveParent(op.P)
		if err != nil {
			return "", err
		}
		switch op.Op {
		case "create":
			_, err = j.Create(ctx, r, pino, name, 0o644)
		case "mkdir":
			_, err = j.Mkdir(ctx, r, pino, name, 0o755)
		default:
			_, err = j.Symlink(ctx, r, pino, name, op.Val)
		}
		return "", err
	case "unlink", "rmdir":
		pino, name, err := c.resolveParent(op.P)
		if err != nil {
			return "", err
		}
		if op.Op == "unlink" {
			return "", j.Unlink(ctx, r, pino, name)
		}
		return "", j.Rmdir(ctx, r, pino, name)
	case "rename":
		pino, name, err := c.resolveParent(op.P)
		if err != nil {
			return "", err
		}
		qino, qname, err := c.resolveParent(op.Q)
		if err != nil {
			return "", err
		}
		return "", j.Rename(ctx, r, pino, name, qino, qname, journal.RenameFlags(op.Flags))
	case "link":
		ino, err := c.resolve(op.P)
		if err != nil {
			return "", err
		}
		qino, qname, err := c.resolveParent(op.Q)
		if err != nil {
			return "", err
		}
		_, err = j.Link(ctx, r, ino, qino, qname)
		return "", err
	}
	ino, err := c.resolve(op.P)
	if err != nil {
		return "", err
	}
	switch op.Op {
	case "write":
		data := crashData(op.K, op.N)
		n, err := j.Write(ctx, r, ino, data, op.Off)
		if err == nil && n != len(data) {
			err = fmt.Errorf("short write: %d of %d bytes", n, len(data))
		}
		return "", err
	case "trunc":
		_, err := j.SetAttr(ctx, r, ino, journal.SetAttrIn{Valid: journal.SetSize, Size: uint64(op.N)})
		return "", err
	case "chmod":
		_, err := j.SetAttr(ctx, r, ino, journal.SetAttrIn{Valid: journal.SetMode, Mode: op.Mode})
		return "", err
	case "setx":
		return "", j.SetXattr(ctx, r, ino, op.Name, []byte(op.Val), 0)
	case "rmx":
		return "", j.RemoveXattr(ctx, r, ino, op.Name)
	case "fsync":
		return "", j.Fsync(ctx, ino, false)
	}
	return "", fmt.Errorf("unknown operation %q", op.Op)
}

// pick chooses the next operation: random, valid in the model.
func (c *crashChildRun) pick() crashOp {
	ents := c.m.entries()
	var dirs, files, nondirs []crashEntry
	dirs = append(dirs, crashEntry{"/", c.m})
	total := int64(0)
	seen := map[*crashNode]bool{}
	for _, e := range ents {
		switch e.n.Type {
		case journal.TypeDir:
			dirs = append(dirs, e)
		case journal.TypeRegular:
			files = append(files, e)
			if !seen[e.n] {
				seen[e.n] = true
				total += int64(len(e.n.Data))
			}
		}
		if e.n.Type != journal.TypeDir {
			nondirs = append(nondirs, e)
		}
	}
	full := len(ents) > crashMaxEntries
	grow := 12
	if full {
		grow = 1
	}
	type choice struct {
		op string
		w  int
	}
	choices := []choice{
		{"create", grow}, {"mkdir", grow / 2}, {"symlink", grow / 3}, {"link", grow / 3},
		{"write", 22}, {"trunc", 6}, {"chmod", 3}, {"rename", 10},
		{"unlink", 6 + 20*crashB2I(full)}, {"rmdir", 3 + 10*crashB2I(full)},
		{"setx", 6}, {"rmx", 2}, {"fsync", 1}, {"snap", 2}, {"rollback", 1},
	}
	sum := 0
	for _, ch := range choices {
		sum += ch.w
	}
	rng := c.rng
	one := func(l []crashEntry) crashEntry { return l[rng.Intn(len(l))] }
	for {
		x := rng.Intn(sum)
		var kind string
		for _, ch := range choices {
			if x < ch.w {
				kind = ch.op
				break
			}
			x -= ch.w
		}
		op := crashOp{K: c.k, Ev: "begin", Op: kind}
		switch kind {
		case "create", "mkdir", "symlink":
			op.P = crashJoin(one(dirs).path, fmt.Sprintf("%c%d", kind[0], c.k))
			if kind == "symlink" {
				op.Val = fmt.Sprintf("target-%d/%s", c.k, strings.Repeat("x", rng.Intn(40)))
			}
		case "link":
			if len(nondirs) == 0 {
				continue
			}
			op.P = one(nondirs).path
			op.Q = crashJoin(one(dirs).path, fmt.Sprintf("h%d", c.k))
		case "write":
			if len(files) == 0 {
				continue
			}
			f := one(files)
			size := int64(len(f.n.Data))
			switch r := rng.Intn(10); {
			case r < 5:
				op.Off = rng.Int63n(size + 1)
			case r < 8:
				op.Off = size
			default:
				op.Off = size + rng.Int63n(5000)
			}
			op.N = 1 + rng.Int63n(2000)
			if rng.Intn(10) == 0 {
				op.N = 4000 + rng.Int63n(200<<10)
			}
			if op.Off+op.N > crashMaxFile || (total > crashMaxTotal && op.Off+op.N > size) {
				continue
			}
			op.P = f.path
		case "trunc":
			if len(files) == 0 {
				continue
			}
			f := one(files)
			op.P = f.path
			size := int64(len(f.n.Data))
			switch r := rng.Intn(10); {
			case r < 3:
				op.N = 0
			case r < 8 || total > crashMaxTotal:
				op.N = rng.Int63n(size + 1)
			default:
				op.N = size + rng.Int63n(10000)
			}
		case "chmod":
			e := one(append(dirs, files...))
			op.P = e.path
			op.Mode = []uint32{0o600, 0o644, 0o755, 0o700, 0o444, 0o640}[rng.Intn(6)]
			if e.n.Type == journal.TypeDir {
				op.Mode |= 0o700 // keep directories usable
			}
		case "rename":
			if len(ents) == 0 || !c.pickRename(&op, ents, dirs) {
				continue
			}
		case "unlink":
			if len(nondirs) == 0 {
				continue
			}
			op.P = one(nondirs).path
		case "rmdir":
			var empty []crashEntry
			for _, d := range dirs[1:] {
				if len(d.n.Kids) == 0 {
					empty = append(empty, d)
				}
			}
			if len(empty) == 0 {
				continue
			}
			op.P = one(empty).path
		case "setx", "rmx":
			e := one(append(dirs, files...))
			op.P = e.path
			if kind == "setx" {
				op.Name = fmt.Sprintf("user.k%d", rng.Intn(4))
				op.Val = fmt.Sprintf("v%d", c.k)
				break
			}
			if len(e.n.Xattrs) == 0 {
				continue
			}
			for k := range e.n.Xattrs {
				op.Name = k
				break
			}
		case "fsync":
			if len(files) == 0 {
				continue
			}
			op.P = one(files).path
		case "snap":
		case "rollback":
			if len(c.snaps) == 0 {
				continue
			}
			op.To = c.snaps[rng.Intn(len(c.snaps))].String()
		}
		return op
	}
}

func crashB2I(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pickRename fills in a rename: to a new name, onto an existing name, or an
// exchange, always valid.
func (c *crashChildRun) pickRename(op *crashOp, ents, dirs []crashEntry) bool {
	rng := c.rng
	src := ents[rng.Intn(len(ents))]
	isDir := src.n.Type == journal.TypeDir
	op.P = src.path
	switch r := rng.Intn(10); {
	case r < 6: // a new name
		var ok []crashEntry
		for _, d := range dirs {
			if !isDir || !crashInside(d.path, src.path) {
				ok = append(ok, d)
			}
		}
		op.Q = crashJoin(ok[rng.Intn(len(ok))].path, fmt.Sprintf("r%d", c.k))
		if rng.Intn(3) == 0 {
			op.Flags = uint32(journal.RenameNoReplace)
		}
	case r < 9: // replace a name
		var ok []crashEntry
		for _, e := range ents {
			eDir := e.n.Type == journal.TypeDir
			if e.path == src.path || eDir != isDir || (eDir && (len(e.n.Kids) > 0 || crashInside(e.path, src.path))) {
				continue
			}
			ok = append(ok, e)
		}
		if len(ok) == 0 {
			return false
		}
		op.Q = ok[rng.Intn(len(ok))].path
	default: // exchange
		var ok []crashEntry
		for _, e := range ents {
			if e.path != src.path && !crashInside(e.path, src.path) && !crashInside(src.path, e.path) {
				ok = append(ok, e)
			}
		}
		if len(ok) == 0 {
			return false
		}
		op.Q = ok[rng.Intn(len(ok))].path
		op.Flags = uint32(journal.RenameExchange)
	}
	return true
}

// ---- the parent ------------------------------------------------------------

type crashRun struct {
	t        *testing.T
	ctx      context.Context
	rng      *rand.Rand
	seed     int64
	base     string // t.TempDir
	dir      string // this generation's directory
	store    string
	jdir     string
	child    *exec.Cmd
	model    *crashNode
	snaps    map[chunkstore.ID]*crashNode
	order    []chunkstore.ID // rollback targets, oldest first
	ref      chunkstore.ID   // the ref's snapshot as acknowledged (zero: none)
	lastSeq  uint64          // Seq of the last snapshot that became the head
	nextK    int64
	cycle    int
	lastKill string // how the last cycle was killed, for messages

	stats struct {
		ops, beforeReady, inflightApplied, inflightNot, landed, parentSnaps, rollbacks, snaps int
		torn                                                                                  int
		ready, child, check                                                                   time.Duration
		inflight                                                                              map[string]int
	}
}

func crashCycles(t *testing.T) int {
	if *crashCyclesFlag > 0 {
		return *crashCyclesFlag
	}
	if s := os.Getenv("CAIRN_CRASH_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("CAIRN_CRASH_CYCLES=%q: want a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return 30
	}
	return 200
}

func TestCrash(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	seed := *crashSeedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	cycles := crashCycles(t)
	t.Logf("crash test: seed %d (-journal.crash.seed=%d), %d cycles", seed, seed, cycles)
	r := &crashRun{t: t, ctx: context.Background(), rng: rand.New(rand.NewSource(seed)), seed: seed, base: t.TempDir()}
	r.stats.inflight = map[string]int{}
	t.Cleanup(r.stopChild)
	start := time.Now()
	for i := range cycles {
		if i%crashGeneration == 0 {
			r.newGeneration(i / crashGeneration)
		}
		r.cycle = i
		r.runCycle()
		if (i+1)%100 == 0 {
			t.Logf("%d cycles in %v", i+1, time.Since(start).Round(time.Millisecond))
		}
	}
	s := r.stats
	t.Logf("%d cycles in %v: %d operations acknowledged, %d snapshots, %d rollbacks; %d kills before the child was ready; in flight at the kill: %v (applied %d, not %d); %d in-flight snapshots landed; %d snapshots by the parent after reopening",
		cycles, time.Since(start).Round(time.Millisecond), s.ops, s.snaps, s.rollbacks, s.beforeReady, s.inflight, s.inflightApplied, s.inflightNot, s.landed, s.parentSnaps)
	t.Logf("time: %v until the child was ready, %v in the child, %v checking", s.ready.Round(time.Millisecond), s.child.Round(time.Millisecond), s.check.Round(time.Millisecond))
	if s.torn > 0 {
		t.Logf("%d in-flight writes were torn by the kill (allowed: see crashTornWrite); each torn state was snapshotted and checked", s.torn)
	}
}

// newGeneration starts a fresh store and journal.
func (r *crashRun) newGeneration(g int) {
	t := r.t
	r.dir = filepath.Join(r.base, fmt.Sprintf("gen%d", g))
	r.store = filepath.Join(r.dir, "store")
	r.jdir = filepath.Join(r.dir, "journal")
	be, err := local.Open(r.store, local.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if _, err := chunkstore.Init(r.ctx, be, chunkstore.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	r.model = crashNewDir(0o755)
	r.snaps = map[chunkstore.ID]*crashNode{}
	r.order = nil
	r.ref = chunkstore.ID{}
	r.lastSeq = 0
}

func (r *crashRun) stopChild() {
	if r.child != nil {
		r.child.Process.Kill()
		r.child.Wait()
		r.child = nil
	}
}

// fail keeps the cycle's files and fails the test.
func (r *crashRun) fail(format string, args ...any) {
	r.t.Helper()
	r.stopChild()
	msg := fmt.Sprintf(format, args...)
	where := "files not kept: "
	if keep, err := os.MkdirTemp("", "cairn-crash-*"); err != nil {
		where += err.Error()
	} else {
		// Badger's goroutines may still delete files: copy what is there.
		out, _ := exec.Command("cp", "-a", r.dir+"/.", keep).CombinedOutput()
		os.WriteFile(filepath.Join(keep, "failure.txt"), []byte(msg+"\n"), 0o644)
		where = "files kept in " + keep + " (store/, journal/, log-N.jsonl, state.json, failure.txt, expected-*.txt, got.txt)"
		if len(out) > 0 {
			where += "; cp: " + strings.TrimSpace(string(out))
		}
	}
	r.t.Fatalf("crash cycle %d (seed %d, %s): %s\n%s", r.cycle, r.seed, r.lastKill, msg, where)
}

func (r *crashRun) runCycle() {
	t := r.t
	ids := make([]string, len(r.order))
	for i, id := range r.order {
		ids[i] = id.String()
	}
	logPath := filepath.Join(r.dir, fmt.Sprintf("log-%d.jsonl", r.cycle))
	st := crashState{Cycle: r.cycle, Seed: r.rng.Int63(), NextK: r.nextK, Snaps: ids, Log: logPath, Store: r.store, Dir: r.jdir}
	data, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(r.dir, "state.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	output := r.runChild()
	t1 := time.Now()
	r.stats.child += t1.Sub(t0)
	defer func() { r.stats.check += time.Since(t1) }()

	ops, inflight, err := crashReadLog(logPath)
	if err != nil {
		r.fail("%v\nchild output:\n%s", err, output)
	}
	r.stats.ops += len(ops)
	if inflight != nil {
		r.nextK = inflight.K + 1
		r.stats.inflight[inflight.Op]++
	} else if len(ops) > 0 {
		r.nextK = ops[len(ops)-1].K + 1
	}

	// Replay the acknowledged operations into the model.
	a := r.model.clone()
	var acked []chunkstore.ID // snapshots acknowledged, in order
	for i := range ops {
		op := &ops[i]
		switch op.Op {
		case "snap":
			id := r.parseID(op.ID)
			r.addSnap(id, a.clone())
			acked = append(acked, id)
			r.ref = id
			r.stats.snaps++
		case "rollback":
			d, to := r.parseID(op.ID), r.parseID(op.To)
			r.addSnap(d, a.clone())
			acked = append(acked, d)
			m, ok := r.snaps[to]
			if !ok {
				r.fail("rollback to unknown snapshot %s", to.Short())
			}
			a = m.clone()
			r.ref = to
			r.stats.rollbacks++
		default:
			if err := crashApply(a, op); err != nil {
				r.fail("replay: %v", err)
			}
		}
	}
	var b *crashNode // the state with the in-flight operation done
	if inflight != nil {
		switch inflight.Op {
		case "snap":
		case "rollback":
			m, ok := r.snaps[r.parseID(inflight.To)]
			if !ok {
				r.fail("rollback to unknown snapshot %s", inflight.To)
			}
			b = m.clone()
		default:
			b = a.clone()
			if err := crashApply(b, inflight); err != nil {
				r.fail("replay of the in-flight operation: %v", err)
			}
		}
	}

	// Reopen.
	be, err := local.Open(r.store, local.Options{})
	if err != nil {
		r.fail("open backend: %v", err)
	}
	defer be.Close()
	store, err := chunkstore.Open(r.ctx, be, chunkstore.Options{})
	if err != nil {
		r.fail("open store: %v", err)
	}
	defer store.Close()
	j, err := journal.Open(r.ctx, crashConfig(r.jdir, store))
	if err != nil {
		r.fail("reopen journal: %v (in flight: %v)", err, inflight)
	}
	defer j.Close()

	// Every acknowledged snapshot holds the state it was taken of.
	for _, id := range acked {
		seq := r.checkSnap(store, id, r.snaps[id], "acknowledged snapshot")
		if seq <= r.lastSeq {
			r.fail("acknowledged snapshot %s has seq %d, an earlier head had %d", id.Short(), seq, r.lastSeq)
		}
		r.lastSeq = seq
	}

	// The journal's state: the model, or the model plus the operation in
	// flight.
	tree, err := crashDump(r.ctx, j)
	if err != nil {
		r.fail("reading the reopened journal: %v", err)
	}
	crashCheckCounters(r.ctx, j, tree)
	if len(tree.problems) > 0 {
		r.fail("the reopened journal is inconsistent (in flight: %v):\n\t%s", inflight, strings.Join(tree.problems, "\n\t"))
	}
	got, wantA := crashCanon(tree.root), crashCanon(a)
	var wantB map[string]string
	if b != nil {
		wantB = crashCanon(b)
	}
	applied, torn := false, false
	dataOp := inflight != nil && (inflight.Op == "write" || inflight.Op == "trunc")
	switch {
	case maps.Equal(got, wantA):
	case wantB != nil && maps.Equal(got, wantB):
		applied = true
	case inflight != nil && inflight.Op == "write" && b != nil && crashTornWrite(tree.root, a, b, inflight.P):
		torn = true
	default:
		os.WriteFile(filepath.Join(r.dir, "expected-before.txt"), []byte(crashCanonString(wantA)), 0o644)
		os.WriteFile(filepath.Join(r.dir, "got.txt"), []byte(crashCanonString(got)), 0o644)
		msg := fmt.Sprintf("the reopened journal is not the state after the %d acknowledged operations of this cycle", len(ops))
		if wantB != nil {
			os.WriteFile(filepath.Join(r.dir, "expected-after.txt"), []byte(crashCanonString(wantB)), 0o644)
			msg += fmt.Sprintf(", nor that plus the one in flight (%v).\nDifferences from the state after it:\n%s", inflight, crashCanonDiff(wantB, got, 20))
		}
		r.fail("%s\nDifferences from the state without it:\n%s", msg, crashCanonDiff(wantA, got, 20))
	}
	if torn {
		r.stats.torn++
	}
	if b != nil && !maps.Equal(wantA, wantB) && !torn {
		if applied {
			r.stats.inflightApplied++
		} else {
			r.stats.inflightNot++
		}
	}

	// The ref: as acknowledged, or moved by the operation in flight.
	ref, err := store.Ref(r.ctx, crashWS)
	switch {
	case errors.Is(err, chunkstore.ErrNotFound):
		if !r.ref.IsZero() {
			r.fail("the workspace has no ref; acknowledged: %s", r.ref.Short())
		}
	case err != nil:
		r.fail("read ref: %v", err)
	case ref.Snapshot == r.ref:
	case inflight != nil && inflight.Op == "snap":
		// The in-flight snapshot landed: it holds the acknowledged state.
		r.landed(store, ref.Snapshot, a, "in-flight snapshot")
	case inflight != nil && inflight.Op == "rollback" && ref.Snapshot == r.parseID(inflight.To):
		if !applied && !maps.Equal(wantA, wantB) {
			r.fail("the ref moved to the rollback's target %s, but the journal is not rolled back", inflight.To)
		}
		r.ref = ref.Snapshot
	case inflight != nil && inflight.Op == "rollback":
		// The state the rollback discards was snapshotted.
		r.landed(store, ref.Snapshot, a, "in-flight rollback's snapshot of the discarded state")
	default:
		r.fail("the ref points at %s; acknowledged %s, in flight: %v", ref.Snapshot.Short(), r.ref.Short(), inflight)
	}
	if applied {
		a = b
	}
	if torn {
		a = tree.root.clone() // what the torn write left: the snapshot below must hold it
	}
	r.model = a

	// A snapshot after reopening works (no spurious conflict) and holds
	// the state.
	if (inflight != nil && (inflight.Op == "snap" || inflight.Op == "rollback")) || dataOp || r.rng.Intn(5) == 0 {
		id, err := j.Snapshot(r.ctx, journal.SnapshotOptions{Message: "after reopen"})
		if err != nil {
			r.fail("snapshot after reopening (in flight: %v): %v", inflight, err)
		}
		r.addSnap(id, r.model.clone())
		seq := r.checkSnap(store, id, r.model, "snapshot after reopening")
		if seq <= r.lastSeq {
			r.fail("snapshot after reopening has seq %d, an earlier head had %d", seq, r.lastSeq)
		}
		r.lastSeq, r.ref = seq, id
		if ref, err := store.Ref(r.ctx, crashWS); err != nil || ref.Snapshot != id {
			r.fail("after a snapshot %s the ref is %s, %v", id.Short(), ref.Snapshot.Short(), err)
		}
		r.stats.parentSnaps++
	}
	if err := j.Close(); err != nil {
		r.fail("close journal: %v", err)
	}
	if err := store.Close(); err != nil {
		r.fail("close store: %v", err)
	}
	// Keep the last few snapshots as rollback targets.
	for len(r.order) > crashKeepSnaps {
		delete(r.snaps, r.order[0])
		r.order = r.order[1:]
	}
	os.Remove(logPath)
}

// crashTornWrite reports whether got is a legal result of the write to the
// file at p that was in flight: everything but that file's bytes is as
// before (a) or as after (b) the write, and each of its bytes is the old or
// the new one.
func crashTornWrite(got, a, b *crashNode, p string) bool {
	gn, an, bn := got.get(p), a.get(p), b.get(p)
	if gn == nil || an == nil || bn == nil || gn.Type != journal.TypeRegular {
		return false
	}
	strip := func(root *crashNode) map[string]string {
		c := root.clone()
		c.get(p).Data = nil
		return crashCanon(c)
	}
	gs := strip(got)
	if !maps.Equal(gs, strip(a)) && !maps.Equal(gs, strip(b)) {
		return false
	}
	if len(gn.Data) != len(an.Data) && len(gn.Data) != len(bn.Data) {
		return false
	}
	for i, c := range gn.Data {
		old := i < len(an.Data) && an.Data[i] == c
		cur := i < len(bn.Data) && bn.Data[i] == c
		if !old && !cur {
			return false
		}
	}
	return true
}

// landed accepts a snapshot an interrupted operation moved the ref to: it
// must hold state want and be newer than every earlier head.
func (r *crashRun) landed(store *chunkstore.Store, id chunkstore.ID, want *crashNode, what string) {
	seq := r.checkSnap(store, id, want, what)
	if seq <= r.lastSeq {
		r.fail("%s %s has seq %d, an earlier head had %d", what, id.Short(), seq, r.lastSeq)
	}
	r.lastSeq, r.ref = seq, id
	r.addSnap(id, want.clone())
	r.stats.landed++
}

// checkSnap checks that snapshot id is readable and holds state want, and
// returns its Seq.
func (r *crashRun) checkSnap(store *chunkstore.Store, id chunkstore.ID, want *crashNode, what string) uint64 {
	tree, snap, err := crashSnapDump(r.ctx, store, id)
	if err != nil {
		r.fail("%s %s: %v", what, id.Short(), err)
	}
	if len(tree.problems) > 0 {
		r.fail("%s %s is inconsistent:\n\t%s", what, id.Short(), strings.Join(tree.problems, "\n\t"))
	}
	if snap.Workspace != crashWS {
		r.fail("%s %s belongs to workspace %q", what, id.Short(), snap.Workspace)
	}
	if w, g := crashCanon(want), crashCanon(tree.root); !maps.Equal(w, g) {
		r.fail("%s %s does not hold the state it was taken of:\n%s", what, id.Short(), crashCanonDiff(w, g, 20))
	}
	return snap.Seq
}

func (r *crashRun) addSnap(id chunkstore.ID, m *crashNode) {
	if _, ok := r.snaps[id]; !ok {
		r.order = append(r.order, id)
	}
	r.snaps[id] = m
}

func (r *crashRun) parseID(s string) chunkstore.ID {
	id, err := chunkstore.ParseID(s)
	if err != nil {
		r.fail("log: snapshot ID %q: %v", s, err)
	}
	return id
}

// runChild starts the child, kills it at a random moment and returns its
// output.
func (r *crashRun) runChild() string {
	t := r.t
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var out bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+r.dir)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		pw.Close()
		t.Fatal(err)
	}
	pw.Close()
	r.child = cmd
	started := time.Now()
	ready := make(chan bool, 1)
	go func() {
		var b [1]byte
		n, _ := pr.Read(b[:])
		ready <- n == 1
	}()
	// Mostly kill the child while it works; sometimes while it opens.
	if r.rng.Intn(5) == 0 {
		d := time.Duration(r.rng.Int63n(int64(60 * time.Millisecond)))
		r.lastKill = fmt.Sprintf("killed %v after start", d)
		time.Sleep(d)
		select {
		case ok := <-ready:
			if !ok {
				r.fail("the child exited before it was ready:\n%s", r.reap(&out))
			}
		default:
			r.stats.beforeReady++
		}
	} else {
		select {
		case ok := <-ready:
			if !ok {
				r.fail("the child exited before it was ready:\n%s", r.reap(&out))
			}
		case <-time.After(60 * time.Second):
			r.fail("the child is not ready after 60s")
		}
		r.stats.ready += time.Since(started)
		d := time.Duration(r.rng.Int63n(int64(40 * time.Millisecond)))
		if r.rng.Intn(5) == 0 { // sometimes let more pile up
			d = 40*time.Millisecond + time.Duration(r.rng.Int63n(int64(110*time.Millisecond)))
		}
		r.lastKill = fmt.Sprintf("killed %v after ready", d)
		time.Sleep(d)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err = cmd.Wait()
	r.child = nil
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		r.fail("child: %v\n%s", err, out.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		r.fail("the child exited by itself (%v):\n%s", err, out.String())
	}
	return out.String()
}

// reap waits for a child that exited and returns its output.
func (r *crashRun) reap(out *bytes.Buffer) string {
	if r.child != nil {
		r.child.Wait()
		r.child = nil
	}
	return out.String()
}

// crashReadLog reads a child's log: the acknowledged operations in order,
// and the one begun but not acknowledged, if any. A last line without its
// newline was being written at the kill and is ignored.
func crashReadLog(path string) (ops []crashOp, inflight *crashOp, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil // killed before it logged anything
	}
	if err != nil {
		return nil, nil, err
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) {
		data = data[:i+1]
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var op crashOp
		if err := dec.Decode(&op); err == io.EOF {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("log %s: %v", path, err)
		}
		switch op.Ev {
		case "err":
			return nil, nil, fmt.Errorf("the child failed: %s", op.Err)
		case "begin":
			if inflight != nil {
				return nil, nil, fmt.Errorf("log %s: operation %d begins before %d was acknowledged", path, op.K, inflight.K)
			}
			inflight = &op
		case "ack":
			if inflight == nil || inflight.K != op.K {
				return nil, nil, fmt.Errorf("log %s: acknowledgement of %d, which is not in flight", path, op.K)
			}
			inflight.ID = op.ID
			ops = append(ops, *inflight)
			inflight = nil
		default:
			return nil, nil, fmt.Errorf("log %s: unknown event %q", path, op.Ev)
		}
	}
	return ops, inflight, nil
}
