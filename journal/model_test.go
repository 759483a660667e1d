package journal_test

// TestJournalMatchesModel is a model-based test: random operation
// sequences (pgregory.net/rapid's state machine) run on a journal and on
// the in-memory reference model (journal/internal/model, itself checked
// against Linux), which share one deterministic clock. Results must be
// equal: the same sentinel error, identical Attrs (inode numbers and
// timestamps included), contents, listings, xattrs. After every step the
// whole tree is compared and the journal's link counts are checked on its
// own. Steps also snapshot, roll back, reopen and fork the journal; the
// model mirrors them with clones.
//
// Calls the kernel never forwards to a FUSE server (an inode number it
// does not know, a non-directory parent, the names "", ".", ".." or with
// '/' or NUL, negative offsets, invalid flags or modes, I/O on a
// non-regular file, xattr names or values beyond the VFS limits...) are
// drawn too, as the journal must survive them; for those the order of
// checks cannot be observed, so any sentinel error passes when the model
// fails (success and results must still match). -journal.model.strict
// compares them strictly as well.
//
// Longer runs:
//
//	go test ./journal -run TestJournalMatchesModel -rapid.checks=1000 -journal.model.steps=200
//
// -rapid.checks is the number of sequences (default 100), -rapid.steps or
// -journal.model.steps the average sequence length (default 30). A failure
// prints the shrunk sequence and a -rapid.failfile / -rapid.seed to replay
// it; -rapid.v shows every draw.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
	"github.com/cairnfs/cairn/journal"
	"github.com/cairnfs/cairn/journal/internal/model"
)

var (
	modelSteps  = flag.Int("journal.model.steps", 0, "TestJournalMatchesModel: average operations per sequence (0: rapid's -rapid.steps)")
	modelStrict = flag.Bool("journal.model.strict", false, "TestJournalMatchesModel: compare error classes of calls a FUSE server never receives too")
)

// modelFS is the filesystem API the journal and the model share; the
// assertions keep the two method sets in step.
type modelFS interface {
	Lookup(ctx context.Context, parent journal.Ino, name string) (journal.Attr, error)
	GetAttr(ctx context.Context, ino journal.Ino) (journal.Attr, error)
	SetAttr(ctx context.Context, c journal.Caller, ino journal.Ino, in journal.SetAttrIn) (journal.Attr, error)
	Create(ctx context.Context, c journal.Caller, parent journal.Ino, name string, mode uint32) (journal.Attr, error)
	Mknod(ctx context.Context, c journal.Caller, parent journal.Ino, name string, typ journal.Type, mode uint32, rdev uint64) (journal.Attr, error)
	Mkdir(ctx context.Context, c journal.Caller, parent journal.Ino, name string, mode uint32) (journal.Attr, error)
	Symlink(ctx context.Context, c journal.Caller, parent journal.Ino, name, target string) (journal.Attr, error)
	Readlink(ctx context.Context, ino journal.Ino) (string, error)
	Link(ctx context.Context, c journal.Caller, ino journal.Ino, newParent journal.Ino, newName string) (journal.Attr, error)
	Unlink(ctx context.Context, c journal.Caller, parent journal.Ino, name string) error
	Rmdir(ctx context.Context, c journal.Caller, parent journal.Ino, name string) error
	Rename(ctx context.Context, c journal.Caller, parent journal.Ino, name string, newParent journal.Ino, newName string, flags journal.RenameFlags) error
	ReadDir(ctx context.Context, ino journal.Ino) ([]journal.DirEntry, error)
	Read(ctx context.Context, ino journal.Ino, p []byte, off int64) (int, error)
	Write(ctx context.Context, c journal.Caller, ino journal.Ino, p []byte, off int64) (int, error)
	Fallocate(ctx context.Context, c journal.Caller, ino journal.Ino, mode journal.FallocMode, off, length int64) error
	CopyFileRange(ctx context.Context, c journal.Caller, in journal.Ino, inOff int64, out journal.Ino, outOff int64, n int64) (int64, error)
	Lseek(ctx context.Context, ino journal.Ino, off int64, whence int) (int64, error)
	GetXattr(ctx context.Context, ino journal.Ino, name string) ([]byte, error)
	SetXattr(ctx context.Context, c journal.Caller, ino journal.Ino, name string, value []byte, flags journal.XattrFlags) error
	ListXattr(ctx context.Context, ino journal.Ino) ([]string, error)
	RemoveXattr(ctx context.Context, c journal.Caller, ino journal.Ino, name string) error
	Fsync(ctx context.Context, ino journal.Ino, dataOnly bool) error
	StatFs(ctx context.Context) (journal.StatFs, error)
}

var (
	_ modelFS = (*journal.Journal)(nil)
	_ modelFS = (*model.Model)(nil)
)

// modelSentinels are the errors results are classified by.
var modelSentinels = []error{
	journal.ErrNotFound, journal.ErrExists, journal.ErrNotDir, journal.ErrIsDir, journal.ErrNotEmpty,
	journal.ErrInvalid, journal.ErrNameTooLong, journal.ErrPermission, journal.ErrNoData, journal.ErrRange,
	journal.ErrTooBig, journal.ErrFileTooBig, journal.ErrNoSpace, journal.ErrTooManyLinks,
	journal.ErrNotSupported, journal.ErrStale, journal.ErrBusy, journal.ErrIO, journal.ErrNoXattrSpace,
	journal.ErrClosed, journal.ErrBadFD, journal.ErrNoSeekData,
}

func modelErrClass(err error) string {
	if err == nil {
		return "ok"
	}
	for _, s := range modelSentinels {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "no sentinel"
}

var (
	modelUser1 = journal.Caller{UID: 1000, GID: 1000, Groups: []uint32{1000, 2000}}
	modelUser2 = journal.Caller{UID: 1001, GID: 2000, Groups: []uint32{2000}}
)

func TestJournalMatchesModel(t *testing.T) {
	if *modelSteps > 0 {
		old := flag.Lookup("rapid.steps").Value.String()
		if err := flag.Set("rapid.steps", strconv.Itoa(*modelSteps)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { flag.Set("rapid.steps", old) })
	}
	store := chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
	base := t.TempDir()
	checks := 0
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		dir, err := os.MkdirTemp(base, "check")
		if err != nil {
			rt.Fatal(err)
		}
		mm := &modelMachine{ctx: context.Background(), store: store, workDir: dir, now: 1_700_000_000_000_000_000,
			saved: map[chunkstore.ID]*model.Model{}}
		mm.cfg = journal.Config{Dir: dir + "/journal", Store: store, Workspace: fmt.Sprintf("ws%d", checks), Clock: mm.clock}
		mm.j = mm.open(rt, mm.cfg)
		mm.m = model.New(mm.clock, journal.RootIno+1)
		defer func() {
			mm.j.Close()
			os.RemoveAll(dir)
		}()
		rt.Repeat(rapid.StateMachineActions(mm))
	})
}

// modelMachine is the state machine: a journal and the model it must
// match. Its exported methods are rapid actions.
type modelMachine struct {
	ctx     context.Context
	store   *chunkstore.Store
	workDir string // this sequence's journals
	cfg     journal.Config
	now     int64

	j     *journal.Journal
	m     *model.Model
	saved map[chunkstore.ID]*model.Model // the model at each snapshot
	snaps []chunkstore.ID                // saved's keys in creation order
	forks int
}

// clock is the journal's and the model's clock: it only moves between
// operations (tick), so both see one instant per operation.
func (mm *modelMachine) clock() int64 { return mm.now }

func (mm *modelMachine) tick() { mm.now += 1000 }

func (mm *modelMachine) open(t *rapid.T, cfg journal.Config) *journal.Journal {
	t.Helper()
	j, err := journal.Open(mm.ctx, cfg)
	if err != nil {
		t.Fatalf("open journal %q: %v", cfg.Workspace, err)
	}
	return j
}

// modelBoth runs op on the journal, then on the model, and compares
// results. odd says the call is one a FUSE server never receives (see the
// file comment).
func modelBoth[R any](t *rapid.T, mm *modelMachine, what string, odd bool, op func(fs modelFS) (R, error)) (R, error) {
	t.Helper()
	defer mm.tick()
	jr, jerr := op(mm.j)
	mr, merr := op(mm.m)
	jc, mc := modelErrClass(jerr), modelErrClass(merr)
	loose := odd && !*modelStrict && merr != nil && jerr != nil && jc != "no sentinel"
	if jc != mc && !loose {
		t.Fatalf("%s: journal says %q (%v), model says %q (%v)", what, jc, jerr, mc, merr)
	}
	if merr == nil && !reflect.DeepEqual(modelNormalize(jr), modelNormalize(mr)) {
		t.Fatalf("%s:\n journal: %s\n   model: %s", what, modelFormat(jr), modelFormat(mr))
	}
	return mr, merr
}

// modelNormalize makes empty slices nil for comparison.
func modelNormalize(v any) any {
	rv := reflect.ValueOf(v)
	if rv.IsValid() && rv.Kind() == reflect.Slice && rv.Len() == 0 {
		return reflect.Zero(rv.Type()).Interface()
	}
	return v
}

// modelFormat prints a result, modes in octal.
func modelFormat(v any) string {
	if a, ok := v.(journal.Attr); ok {
		return fmt.Sprintf("{Ino:%d Type:%v Mode:%#o UID:%d GID:%d Size:%d Nlink:%d Rdev:%#x Atime:%d Mtime:%d Ctime:%d}",
			a.Ino, a.Type, a.Mode, a.UID, a.GID, a.Size, a.Nlink, a.Rdev, a.Atime, a.Mtime, a.Ctime)
	}
	return fmt.Sprintf("%+v", v)
}

func modelErrOnly(err error) (struct{}, error) { return struct{}{}, err }

// ---- drawing arguments -----------------------------------------------

// live reports whether every ino is a live inode of one of types (any
// type if none).
func (mm *modelMachine) live(inos []journal.Ino, types ...journal.Type) bool {
	for _, ino := range inos {
		a, ok := mm.attr(ino)
		if !ok || len(types) > 0 && !slices.Contains(types, a.Type) {
			return false
		}
	}
	return true
}

// oddNames reports whether a name is one the kernel resolves itself or
// rejects: "", ".", "..", or one with '/' or NUL.
func oddNames(names ...string) bool {
	for _, n := range names {
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") {
			return true
		}
	}
	return false
}

// oddEntry reports whether a call on name in parent cannot reach a FUSE
// server: parent is not a live directory or name is odd.
func (mm *modelMachine) oddEntry(parent journal.Ino, name string) bool {
	return !mm.live([]journal.Ino{parent}, journal.TypeDir) || oddNames(name)
}

func (mm *modelMachine) caller(t *rapid.T) journal.Caller {
	return rapid.SampledFrom([]journal.Caller{journal.Root, journal.Root, modelUser1, modelUser2}).Draw(t, "caller")
}

func (mm *modelMachine) attr(ino journal.Ino) (journal.Attr, bool) {
	a, err := mm.m.GetAttr(mm.ctx, ino)
	return a, err == nil
}

// ino draws a live inode of one of types (any type if none), now and
// then one that does not exist (never allocated, or the next one).
func (mm *modelMachine) ino(t *rapid.T, label string, types ...journal.Type) journal.Ino {
	var cands []journal.Ino
	for _, ino := range mm.m.Inos() {
		if a, _ := mm.attr(ino); len(types) == 0 || slices.Contains(types, a.Type) {
			cands = append(cands, ino)
		}
	}
	if len(cands) == 0 || rapid.IntRange(0, 99).Draw(t, label+"Bogus") < 5 {
		return rapid.SampledFrom([]journal.Ino{1 << 40, mm.m.NextIno(), 0}).Draw(t, label)
	}
	return rapid.SampledFrom(cands).Draw(t, label)
}

func (mm *modelMachine) dir(t *rapid.T, label string) journal.Ino {
	if rapid.IntRange(0, 99).Draw(t, label+"AnyType") < 8 {
		return mm.ino(t, label)
	}
	return mm.ino(t, label, journal.TypeDir)
}

// name draws a name for dir: often an existing entry, else a small pool
// (collisions), now and then an invalid one.
func (mm *modelMachine) name(t *rapid.T, dir journal.Ino, label string) string {
	if ents, err := mm.m.ReadDir(mm.ctx, dir); err == nil && len(ents) > 0 && rapid.Bool().Draw(t, label+"Existing") {
		return rapid.SampledFrom(ents).Draw(t, label).Name
	}
	if rapid.IntRange(0, 99).Draw(t, label+"Odd") < 8 {
		return rapid.SampledFrom([]string{".", "..", "", "x/y", "z\x00", strings.Repeat("L", journal.NameMax),
			strings.Repeat("N", journal.NameMax+1)}).Draw(t, label)
	}
	return rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(t, label)
}

func (mm *modelMachine) mode(t *rapid.T) uint32 {
	return rapid.SampledFrom([]uint32{0o644, 0o755, 0o600, 0o4755, 0o2755, 0o2745, 0o1777, 0o2777, 0o7777, 0o0}).Draw(t, "mode")
}

func (mm *modelMachine) size(ino journal.Ino) int64 {
	a, _ := mm.attr(ino)
	return int64(a.Size)
}

func (mm *modelMachine) off(t *rapid.T, ino journal.Ino, label string) int64 {
	size := mm.size(ino)
	switch rapid.IntRange(0, 6).Draw(t, label+"Kind") {
	case 0:
		return 0
	case 1:
		return size
	case 2:
		return size + rapid.Int64Range(1, 9000).Draw(t, label)
	case 3:
		return max(0, 4096*rapid.Int64Range(0, 4).Draw(t, label)+rapid.Int64Range(-1, 1).Draw(t, label+"Delta"))
	case 4:
		return rapid.SampledFrom([]int64{-1, journal.FileSizeMax - 1, journal.FileSizeMax, journal.FileSizeMax + 1}).Draw(t, label)
	}
	return rapid.Int64Range(0, 20000).Draw(t, label)
}

// modelData draws bytes for a write.
func modelData(t *rapid.T, label string) []byte {
	return modelBytes(t, label, rapid.SampledFrom([]int{0, 1, 100, 4095, 4096, 4097, 9000}).Draw(t, label+"Len"))
}

// modelBytes draws n bytes from a seed: cheap to draw and to shrink.
func modelBytes(t *rapid.T, label string, n int) []byte {
	rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, label+"Seed"), 0))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

func (mm *modelMachine) xattrName(t *rapid.T) string {
	return rapid.SampledFrom([]string{"user.a", "user.b", "user.a", "trusted.t", "security.s", "user.",
		"foo.bar", "", "user." + strings.Repeat("x", journal.XattrNameMax)}).Draw(t, "xattr")
}

// ---- namespace actions ----------------------------------------------

func (mm *modelMachine) Create(t *rapid.T) {
	c, parent := mm.caller(t), mm.dir(t, "parent")
	name, mode := mm.name(t, parent, "name"), mm.mode(t)
	modelBoth(t, mm, fmt.Sprintf("Create(%d, %q, %#o)", parent, name, mode), mm.oddEntry(parent, name), func(fs modelFS) (journal.Attr, error) {
		return fs.Create(mm.ctx, c, parent, name, mode)
	})
}

func (mm *modelMachine) Mknod(t *rapid.T) {
	c, parent := mm.caller(t), mm.dir(t, "parent")
	name, mode := mm.name(t, parent, "name"), mm.mode(t)
	typ := rapid.SampledFrom([]journal.Type{journal.TypeFIFO, journal.TypeSocket, journal.TypeCharDev,
		journal.TypeBlockDev, journal.TypeRegular, journal.TypeDir, journal.TypeSymlink}).Draw(t, "type")
	rdev := rapid.Uint64Range(0, 1<<20).Draw(t, "rdev")
	modelBoth(t, mm, fmt.Sprintf("Mknod(%d, %q, %v, %#o, %#x)", parent, name, typ, mode, rdev), mm.oddEntry(parent, name) || typ == journal.TypeDir || typ == journal.TypeSymlink, func(fs modelFS) (journal.Attr, error) {
		return fs.Mknod(mm.ctx, c, parent, name, typ, mode, rdev)
	})
}

func (mm *modelMachine) Mkdir(t *rapid.T) {
	c, parent := mm.caller(t), mm.dir(t, "parent")
	name, mode := mm.name(t, parent, "name"), mm.mode(t)
	modelBoth(t, mm, fmt.Sprintf("Mkdir(%d, %q, %#o)", parent, name, mode), mm.oddEntry(parent, name), func(fs modelFS) (journal.Attr, error) {
		return fs.Mkdir(mm.ctx, c, parent, name, mode)
	})
}

func (mm *modelMachine) Symlink(t *rapid.T) {
	c, parent := mm.caller(t), mm.dir(t, "parent")
	name := mm.name(t, parent, "name")
	target := rapid.SampledFrom([]string{"a", "../b", "/abs/path", "", strings.Repeat("t", journal.SymlinkMax),
		strings.Repeat("t", journal.SymlinkMax+1)}).Draw(t, "target")
	modelBoth(t, mm, fmt.Sprintf("Symlink(%d, %q, %d bytes)", parent, name, len(target)), mm.oddEntry(parent, name) || target == "" || len(target) > journal.SymlinkMax, func(fs modelFS) (journal.Attr, error) {
		return fs.Symlink(mm.ctx, c, parent, name, target)
	})
}

func (mm *modelMachine) Link(t *rapid.T) {
	c, ino, parent := mm.caller(t), mm.ino(t, "ino"), mm.dir(t, "parent")
	name := mm.name(t, parent, "name")
	modelBoth(t, mm, fmt.Sprintf("Link(%d, %d, %q)", ino, parent, name), !mm.live([]journal.Ino{ino}, journal.TypeRegular, journal.TypeSymlink, journal.TypeFIFO, journal.TypeSocket, journal.TypeCharDev, journal.TypeBlockDev) || mm.oddEntry(parent, name), func(fs modelFS) (journal.Attr, error) {
		return fs.Link(mm.ctx, c, ino, parent, name)
	})
}

func (mm *modelMachine) Unlink(t *rapid.T) {
	c, parent := mm.caller(t), mm.dir(t, "parent")
	name := mm.name(t, parent, "name")
	modelBoth(t, mm, fmt.Sprintf("Unlink(%d, %q)", parent, name), mm.oddEntry(parent, name), func(fs modelFS) (struct{}, error) {
		return modelErrOnly(fs.Unlink(mm.ctx, c, parent, name))
	})
}

func (mm *modelMachine) Rmdir(t *rapid.T) {
	c, parent := mm.caller(t), mm.dir(t, "parent")
	name := mm.name(t, parent, "name")
	modelBoth(t, mm, fmt.Sprintf("Rmdir(%d, %q)", parent, name), mm.oddEntry(parent, name), func(fs modelFS) (struct{}, error) {
		return modelErrOnly(fs.Rmdir(mm.ctx, c, parent, name))
	})
}

func (mm *modelMachine) Rename(t *rapid.T) {
	c, p1 := mm.caller(t), mm.dir(t, "parent")
	n1 := mm.name(t, p1, "name")
	p2 := p1
	if rapid.Bool().Draw(t, "otherParent") {
		p2 = mm.dir(t, "newParent")
	}
	n2 := mm.name(t, p2, "newName")
	flags := rapid.SampledFrom([]journal.RenameFlags{0, 0, journal.RenameNoReplace, journal.RenameExchange}).Draw(t, "flags")
	if rapid.IntRange(0, 99).Draw(t, "oddFlags") < 4 {
		flags = rapid.SampledFrom([]journal.RenameFlags{journal.RenameNoReplace | journal.RenameExchange, 1 << 2, 1 << 7}).Draw(t, "flags")
	}
	modelBoth(t, mm, fmt.Sprintf("Rename(%d, %q, %d, %q, %#x)", p1, n1, p2, n2, flags), mm.oddEntry(p1, n1) || mm.oddEntry(p2, n2) || flags&^(journal.RenameNoReplace|journal.RenameExchange|1<<2) != 0 || flags&journal.RenameNoReplace != 0 && flags&journal.RenameExchange != 0, func(fs modelFS) (struct{}, error) {
		return modelErrOnly(fs.Rename(mm.ctx, c, p1, n1, p2, n2, flags))
	})
}

func (mm *modelMachine) Lookup(t *rapid.T) {
	parent := mm.dir(t, "parent")
	name := mm.name(t, parent, "name")
	modelBoth(t, mm, fmt.Sprintf("Lookup(%d, %q)", parent, name), mm.oddEntry(parent, name), func(fs modelFS) (journal.Attr, error) {
		return fs.Lookup(mm.ctx, parent, name)
	})
}

func (mm *modelMachine) GetAttr(t *rapid.T) {
	ino := mm.ino(t, "ino")
	modelBoth(t, mm, fmt.Sprintf("GetAttr(%d)", ino), !mm.live([]journal.Ino{ino}), func(fs modelFS) (journal.Attr, error) { return fs.GetAttr(mm.ctx, ino) })
}

func (mm *modelMachine) ReadDir(t *rapid.T) {
	ino := mm.ino(t, "ino")
	modelBoth(t, mm, fmt.Sprintf("ReadDir(%d)", ino), !mm.live([]journal.Ino{ino}, journal.TypeDir), func(fs modelFS) ([]journal.DirEntry, error) { return fs.ReadDir(mm.ctx, ino) })
}

func (mm *modelMachine) Readlink(t *rapid.T) {
	ino := mm.ino(t, "ino")
	modelBoth(t, mm, fmt.Sprintf("Readlink(%d)", ino), !mm.live([]journal.Ino{ino}, journal.TypeSymlink), func(fs modelFS) (string, error) { return fs.Readlink(mm.ctx, ino) })
}

func (mm *modelMachine) SetAttr(t *rapid.T) {
	c, ino := mm.caller(t), mm.ino(t, "ino")
	var in journal.SetAttrIn
	for _, f := range []struct {
		bit  journal.SetAttrValid
		name string
	}{
		{journal.SetMode, "setMode"}, {journal.SetUID, "setUID"}, {journal.SetGID, "setGID"}, {journal.SetSize, "setSize"},
		{journal.SetAtime, "setAtime"}, {journal.SetAtimeNow, "setAtimeNow"}, {journal.SetMtime, "setMtime"},
		{journal.SetMtimeNow, "setMtimeNow"}, {journal.SetCtime, "setCtime"},
	} {
		if rapid.IntRange(0, 3).Draw(t, f.name) == 0 {
			in.Valid |= f.bit
		}
	}
	in.Mode = mm.mode(t)
	in.UID = rapid.SampledFrom([]uint32{0, 1000, 1001}).Draw(t, "uid")
	in.GID = rapid.SampledFrom([]uint32{0, 1000, 2000}).Draw(t, "gid")
	in.Size = uint64(max(0, mm.off(t, ino, "size")))
	in.Atime = rapid.Int64Range(0, 1<<62).Draw(t, "atime")
	in.Mtime = rapid.Int64Range(0, 1<<62).Draw(t, "mtime")
	in.Ctime = rapid.Int64Range(0, 1<<62).Draw(t, "ctime")
	modelBoth(t, mm, fmt.Sprintf("SetAttr(%d, %+v)", ino, in), mm.oddSetAttr(ino, in), func(fs modelFS) (journal.Attr, error) {
		return fs.SetAttr(mm.ctx, c, ino, in)
	})
}

// ---- data actions ---------------------------------------------------

// dataIno draws mostly regular files.
func (mm *modelMachine) dataIno(t *rapid.T, label string) journal.Ino {
	if rapid.IntRange(0, 99).Draw(t, label+"AnyType") < 10 {
		return mm.ino(t, label)
	}
	return mm.ino(t, label, journal.TypeRegular)
}

func (mm *modelMachine) Write(t *rapid.T) {
	c, ino := mm.caller(t), mm.dataIno(t, "ino")
	off, p := mm.off(t, ino, "off"), modelData(t, "data")
	modelBoth(t, mm, fmt.Sprintf("Write(%d, %d bytes at %d)", ino, len(p), off), !mm.live([]journal.Ino{ino}, journal.TypeRegular) || off < 0, func(fs modelFS) (int, error) {
		return fs.Write(mm.ctx, c, ino, p, off)
	})
}

func (mm *modelMachine) Read(t *rapid.T) {
	ino := mm.dataIno(t, "ino")
	off, n := mm.off(t, ino, "off"), rapid.IntRange(0, 10000).Draw(t, "n")
	modelBoth(t, mm, fmt.Sprintf("Read(%d, %d bytes at %d)", ino, n, off), !mm.live([]journal.Ino{ino}, journal.TypeRegular) || off < 0, func(fs modelFS) ([]byte, error) {
		buf := make([]byte, n)
		got, err := fs.Read(mm.ctx, ino, buf, off)
		return buf[:max(got, 0)], err
	})
}

func (mm *modelMachine) Fallocate(t *rapid.T) {
	c, ino := mm.caller(t), mm.dataIno(t, "ino")
	mode := rapid.SampledFrom([]journal.FallocMode{0, journal.FallocKeepSize, journal.FallocPunchHole | journal.FallocKeepSize,
		journal.FallocZeroRange, journal.FallocZeroRange | journal.FallocKeepSize, journal.FallocPunchHole, 0x08}).Draw(t, "mode")
	off, length := mm.off(t, ino, "off"), rapid.Int64Range(-1, 20000).Draw(t, "length")
	modelBoth(t, mm, fmt.Sprintf("Fallocate(%d, %#x, %d, %d)", ino, mode, off, length), !mm.live([]journal.Ino{ino}, journal.TypeRegular) || off < 0 || length <= 0 || !slices.Contains(modelFallocModes, mode), func(fs modelFS) (struct{}, error) {
		return modelErrOnly(fs.Fallocate(mm.ctx, c, ino, mode, off, length))
	})
}

func (mm *modelMachine) CopyFileRange(t *rapid.T) {
	c, in := mm.caller(t), mm.dataIno(t, "in")
	out := in
	if rapid.IntRange(0, 3).Draw(t, "sameFile") != 0 {
		out = mm.dataIno(t, "out")
	}
	inOff, outOff := mm.off(t, in, "inOff"), mm.off(t, out, "outOff")
	n := rapid.Int64Range(0, 12000).Draw(t, "n")
	modelBoth(t, mm, fmt.Sprintf("CopyFileRange(%d@%d -> %d@%d, %d)", in, inOff, out, outOff, n), !mm.live([]journal.Ino{in, out}, journal.TypeRegular) || inOff < 0 || outOff < 0 || in == out, func(fs modelFS) (int64, error) {
		return fs.CopyFileRange(mm.ctx, c, in, inOff, out, outOff, n)
	})
}

func (mm *modelMachine) Lseek(t *rapid.T) {
	ino := mm.dataIno(t, "ino")
	off := mm.off(t, ino, "off")
	whence := rapid.SampledFrom([]int{journal.SeekData, journal.SeekHole, 0}).Draw(t, "whence")
	what := fmt.Sprintf("Lseek(%d, %d, %d)", ino, off, whence)
	if !mm.live([]journal.Ino{ino}, journal.TypeRegular) || whence != journal.SeekData && whence != journal.SeekHole || off < 0 || off >= mm.size(ino) {
		modelBoth(t, mm, what, true, func(fs modelFS) (int64, error) {
			return fs.Lseek(mm.ctx, ino, off, whence)
		})
		return
	}
	// The journal reports holes where its staging file or chunk list has
	// them, the model none (POSIX allows both). Any answer is right that
	// the bytes bear out: SEEK_DATA skips only zeros (ENXIO: zeros to the
	// end); SEEK_HOLE stops at the end or at zeros.
	defer mm.tick()
	size := mm.size(ino)
	got, err := mm.j.Lseek(mm.ctx, ino, off, whence)
	switch {
	case whence == journal.SeekData && errors.Is(err, journal.ErrNoSeekData):
		mm.checkZeros(t, what+" = ENXIO", ino, off, size)
	case err != nil:
		t.Fatalf("%s: %v", what, err)
	case got < off || got > size || whence == journal.SeekData && got == size:
		t.Fatalf("%s = %d: outside [%d, %d)", what, got, off, size)
	case whence == journal.SeekData:
		mm.checkZeros(t, fmt.Sprintf("%s = %d", what, got), ino, off, got)
	case got < size:
		mm.checkZeros(t, fmt.Sprintf("%s = %d", what, got), ino, got, min(size, got+1))
	}
}

// checkZeros fails unless the model's bytes of ino in [from, to) are zeros;
// of a long range, it checks the first and last 64 KiB.
func (mm *modelMachine) checkZeros(t *rapid.T, what string, ino journal.Ino, from, to int64) {
	t.Helper()
	const window = 64 << 10
	check := func(lo, hi int64) {
		buf := make([]byte, hi-lo)
		if _, err := mm.m.Read(mm.ctx, ino, buf, lo); err != nil {
			t.Fatalf("%s: model read: %v", what, err)
		}
		for i, b := range buf {
			if b != 0 {
				t.Fatalf("%s: the model has data at %d, within what the journal calls a hole", what, lo+int64(i))
			}
		}
	}
	if to-from <= 2*window {
		check(from, to)
		return
	}
	check(from, from+window)
	check(to-window, to)
}

func (mm *modelMachine) Fsync(t *rapid.T) {
	ino, dataOnly := mm.ino(t, "ino"), rapid.Bool().Draw(t, "dataOnly")
	modelBoth(t, mm, fmt.Sprintf("Fsync(%d)", ino), !mm.live([]journal.Ino{ino}), func(fs modelFS) (struct{}, error) {
		return modelErrOnly(fs.Fsync(mm.ctx, ino, dataOnly))
	})
}

// ---- xattr actions --------------------------------------------------

func (mm *modelMachine) SetXattr(t *rapid.T) {
	c, ino, name := mm.caller(t), mm.ino(t, "ino"), mm.xattrName(t)
	value := modelBytes(t, "value", rapid.SampledFrom([]int{0, 1, 100}).Draw(t, "valueLen"))
	if rapid.IntRange(0, 99).Draw(t, "bigValue") < 3 {
		value = make([]byte, rapid.SampledFrom([]int{journal.XattrSizeMax, journal.XattrSizeMax + 1}).Draw(t, "bigLen"))
	}
	flags := rapid.SampledFrom([]journal.XattrFlags{0, 0, journal.XattrCreate, journal.XattrReplace,
		journal.XattrCreate | journal.XattrReplace, 4}).Draw(t, "flags")
	modelBoth(t, mm, fmt.Sprintf("SetXattr(%d, %q, %d bytes, %d)", ino, name, len(value), flags), mm.oddXattr(&c, ino, name) || len(value) > journal.XattrSizeMax || flags&^(journal.XattrCreate|journal.XattrReplace) != 0, func(fs modelFS) (struct{}, error) {
		return modelErrOnly(fs.SetXattr(mm.ctx, c, ino, name, value, flags))
	})
}

func (mm *modelMachine) GetXattr(t *rapid.T) {
	ino, name := mm.ino(t, "ino"), mm.xattrName(t)
	modelBoth(t, mm, fmt.Sprintf("GetXattr(%d, %q)", ino, name), mm.oddXattr(nil, ino, name), func(fs modelFS) ([]byte, error) {
		return fs.GetXattr(mm.ctx, ino, name)
	})
}

func (mm *modelMachine) ListXattr(t *rapid.T) {
	ino := mm.ino(t, "ino")
	modelBoth(t, mm, fmt.Sprintf("ListXattr(%d)", ino), !mm.live([]journal.Ino{ino}), func(fs modelFS) ([]string, error) { return fs.ListXattr(mm.ctx, ino) })
}

func (mm *modelMachine) RemoveXattr(t *rapid.T) {
	c, ino, name := mm.caller(t), mm.ino(t, "ino"), mm.xattrName(t)
	modelBoth(t, mm, fmt.Sprintf("RemoveXattr(%d, %q)", ino, name), mm.oddXattr(&c, ino, name), func(fs modelFS) (struct{}, error) {
		return modelErrOnly(fs.RemoveXattr(mm.ctx, c, ino, name))
	})
}

// ---- journal-only actions, mirrored in the model ---------------------

func (mm *modelMachine) Snapshot(t *rapid.T) {
	defer mm.tick()
	id, err := mm.j.Snapshot(mm.ctx, journal.SnapshotOptions{Message: fmt.Sprintf("snapshot %d", len(mm.snaps))})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	mm.save(id, mm.m.Clone())
}

func (mm *modelMachine) save(id chunkstore.ID, m *model.Model) {
	if _, ok := mm.saved[id]; !ok {
		mm.snaps = append(mm.snaps, id)
	}
	mm.saved[id] = m
}

func (mm *modelMachine) Rollback(t *rapid.T) {
	if len(mm.snaps) == 0 {
		t.Skip("no snapshot yet")
	}
	defer mm.tick()
	to := rapid.SampledFrom(mm.snaps).Draw(t, "to")
	discarded, err := mm.j.Rollback(mm.ctx, to, true)
	if err != nil {
		t.Fatalf("Rollback to %s: %v", to.Short(), err)
	}
	pre := mm.m
	mm.m = mm.saved[to].Clone()
	// Inode numbers are never reused within a journal's life.
	mm.m.SetNextIno(max(pre.NextIno(), mm.m.NextIno()))
	if !discarded.IsZero() {
		mm.save(discarded, pre.Clone())
	}
}

func (mm *modelMachine) Reopen(t *rapid.T) {
	defer mm.tick()
	if err := mm.j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mm.j = mm.open(t, mm.cfg)
}

// Fork replaces the journal by a new workspace's journal started from a
// snapshot; the model becomes that snapshot's, inode counter included.
func (mm *modelMachine) Fork(t *rapid.T) {
	if len(mm.snaps) == 0 {
		t.Skip("no snapshot yet")
	}
	defer mm.tick()
	from := rapid.SampledFrom(mm.snaps).Draw(t, "from")
	if err := mm.j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mm.forks++
	mm.cfg.Dir = fmt.Sprintf("%s/fork%d", mm.workDir, mm.forks)
	mm.cfg.Workspace = fmt.Sprintf("%s-fork%d", strings.Split(mm.cfg.Workspace, "-")[0], mm.forks)
	mm.cfg.From = from
	mm.j = mm.open(t, mm.cfg)
	mm.m = mm.saved[from].Clone()
}

// modelFallocModes are the fallocate modes the kernel forwards to a FUSE
// server.
var modelFallocModes = []journal.FallocMode{0, journal.FallocKeepSize, journal.FallocPunchHole | journal.FallocKeepSize,
	journal.FallocZeroRange, journal.FallocZeroRange | journal.FallocKeepSize}

// oddSetAttr reports whether the kernel rejects a setattr itself: a
// missing inode, chmod of a symlink, truncation of a non-regular file.
func (mm *modelMachine) oddSetAttr(ino journal.Ino, in journal.SetAttrIn) bool {
	a, ok := mm.attr(ino)
	return !ok || in.Valid&journal.SetMode != 0 && a.Type == journal.TypeSymlink ||
		in.Valid&journal.SetSize != 0 && a.Type != journal.TypeRegular
}

// oddXattr reports whether the VFS rejects an xattr call itself: a
// missing inode, a name that is empty or too long, "user." on an inode
// that is neither a regular file nor a directory or, for a write (c not
// nil), on a sticky directory c does not own, "trusted." or "security."
// written by an unprivileged caller.
func (mm *modelMachine) oddXattr(c *journal.Caller, ino journal.Ino, name string) bool {
	a, ok := mm.attr(ino)
	if !ok || name == "" || len(name) > journal.XattrNameMax {
		return true
	}
	if strings.HasPrefix(name, "user.") {
		if a.Type != journal.TypeRegular && a.Type != journal.TypeDir {
			return true
		}
		if c != nil && a.Type == journal.TypeDir && a.Mode&journal.ModeSticky != 0 && !c.Privileged() && c.UID != a.UID {
			return true
		}
	}
	return c != nil && !c.Privileged() && (strings.HasPrefix(name, "trusted.") || strings.HasPrefix(name, "security."))
}

// ---- invariants -----------------------------------------------------

// Check compares the whole tree, then checks the journal's link counts
// on its own.
func (mm *modelMachine) Check(t *rapid.T) {
	ctx := mm.ctx
	names := map[journal.Ino]int{} // names of each non-directory, in the journal
	seen := map[journal.Ino]bool{}
	var walk func(ino journal.Ino, path string)
	walk = func(ino journal.Ino, path string) {
		ja, jerr := mm.j.GetAttr(ctx, ino)
		ma, merr := mm.m.GetAttr(ctx, ino)
		if jerr != nil || merr != nil || ja != ma {
			t.Fatalf("%s: attributes differ:\n journal: %s %v\n   model: %s %v", path, modelFormat(ja), jerr, modelFormat(ma), merr)
		}
		if seen[ino] {
			return
		}
		seen[ino] = true
		switch ma.Type {
		case journal.TypeDir:
			jents, jerr := mm.j.ReadDir(ctx, ino)
			ments, _ := mm.m.ReadDir(ctx, ino)
			if jerr != nil || !reflect.DeepEqual(modelNormalize(jents), modelNormalize(ments)) {
				t.Fatalf("%s: entries differ:\n journal: %v %v\n   model: %v", path, jents, jerr, ments)
			}
			subdirs := 0
			for _, e := range jents {
				if e.Type == journal.TypeDir {
					subdirs++
				} else {
					names[e.Ino]++
				}
				walk(e.Ino, path+"/"+e.Name)
			}
			if ja.Nlink != uint32(2+subdirs) {
				t.Fatalf("%s: journal nlink %d, %d subdirectories", path, ja.Nlink, subdirs)
			}
		case journal.TypeRegular:
			mm.compareData(t, path, ino, ma.Size)
		case journal.TypeSymlink:
			jl, jerr := mm.j.Readlink(ctx, ino)
			ml, _ := mm.m.Readlink(ctx, ino)
			if jerr != nil || jl != ml {
				t.Fatalf("%s: targets differ: journal %q (%v), model %q", path, jl, jerr, ml)
			}
		}
		jx, jerr := mm.j.ListXattr(ctx, ino)
		mx, _ := mm.m.ListXattr(ctx, ino)
		if jerr != nil || !slices.Equal(jx, mx) {
			t.Fatalf("%s: xattr names differ: journal %q (%v), model %q", path, jx, jerr, mx)
		}
		for _, x := range mx {
			jv, jerr := mm.j.GetXattr(ctx, ino, x)
			mv, _ := mm.m.GetXattr(ctx, ino, x)
			if jerr != nil || !bytes.Equal(jv, mv) {
				t.Fatalf("%s: xattr %s differs: journal %d bytes (%v), model %d bytes", path, x, len(jv), jerr, len(mv))
			}
		}
	}
	walk(journal.RootIno, "")
	for ino, n := range names {
		if a, _ := mm.j.GetAttr(ctx, ino); a.Nlink != uint32(n) {
			t.Fatalf("inode %d: journal nlink %d, %d names", ino, a.Nlink, n)
		}
	}
	if len(seen) != len(mm.m.Inos()) {
		t.Fatalf("%d inodes reachable, the model has %d", len(seen), len(mm.m.Inos()))
	}
	if _, err := mm.j.StatFs(ctx); err != nil {
		t.Fatalf("StatFs: %v", err)
	}
}

// compareData compares a file's bytes in the journal and the model: all of
// them for a small file; for a large (sparse) one, every page the model
// holds data in, the last page, and a few other pages, which must be zeros.
func (mm *modelMachine) compareData(t *rapid.T, path string, ino journal.Ino, size uint64) {
	window := func(off int64, n int64) {
		jb, mb := make([]byte, n+1), make([]byte, n+1)
		jn, jerr := mm.j.Read(ctx, ino, jb, off)
		mn, _ := mm.m.Read(ctx, ino, mb, off)
		if jerr != nil || !bytes.Equal(jb[:jn], mb[:mn]) {
			t.Fatalf("%s: contents differ at [%d, +%d): journal %d bytes (%v), model %d bytes", path, off, n, jn, jerr, mn)
		}
	}
	if size <= 8<<20 {
		window(0, int64(size))
		return
	}
	pages, psize := mm.m.DataPages(ino)
	for _, off := range pages {
		window(off, psize)
	}
	window(int64(size)-min(int64(size), psize), psize)
	for _, off := range []int64{0, int64(size) / 3, int64(size) / 2} {
		window(off/psize*psize, psize)
	}
}
