//go:build linux

package model

// The differential test: random operation sequences run on the model and,
// through system calls, on a fresh tmpfs; after every operation the error
// classes, the whole tree (names, types, modes, owners, link counts, sizes,
// contents, symlink targets, xattrs, hard-link identity) and which of
// atime/mtime/ctime changed must agree. Operations run as root and as two
// unprivileged callers (on a throw-away OS thread with their credentials);
// an unprivileged operation runs only when the kernel's rwx permission
// checks, which the model leaves to the kernel, would pass.
//
//	go test ./journal/internal/model/ -run 'TestLinux$' -model.linux.runs=20 -model.linux.ops=5000
//	go test ./journal/internal/model/ -run 'TestLinux$' -model.linux.seed=N -model.linux.ops=M

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/journal"

	"github.com/cairnfs/cairn/internal/testenv"
)

var (
	linuxSeed = flag.Uint64("model.linux.seed", 0, "run the differential test with this seed only (0: random seeds)")
	linuxRuns = flag.Int("model.linux.runs", 8, "differential test: number of runs (each on a fresh tmpfs)")
	linuxOps  = flag.Int("model.linux.ops", 600, "differential test: operations per run")
)

var (
	user1 = journal.Caller{UID: 1000, GID: 1000, Groups: []uint32{1000, 2000}}
	user2 = journal.Caller{UID: 1001, GID: 2000, Groups: []uint32{2000}}
)

// sentinels is every journal sentinel an operation may return.
var sentinels = []error{
	journal.ErrNotFound, journal.ErrExists, journal.ErrNotDir, journal.ErrIsDir,
	journal.ErrNotEmpty, journal.ErrInvalid, journal.ErrNameTooLong, journal.ErrPermission,
	journal.ErrNoData, journal.ErrRange, journal.ErrTooBig, journal.ErrFileTooBig,
	journal.ErrNoSpace, journal.ErrTooManyLinks, journal.ErrNotSupported, journal.ErrBusy,
	journal.ErrNoXattrSpace, journal.ErrNoSeekData,
}

// errnoSentinel maps the errnos the kernel returns to journal sentinels.
var errnoSentinel = map[syscall.Errno]error{
	unix.ENOENT: journal.ErrNotFound, unix.EEXIST: journal.ErrExists, unix.ENOTDIR: journal.ErrNotDir,
	unix.EISDIR: journal.ErrIsDir, unix.ENOTEMPTY: journal.ErrNotEmpty, unix.EINVAL: journal.ErrInvalid,
	unix.ENAMETOOLONG: journal.ErrNameTooLong, unix.EPERM: journal.ErrPermission,
	unix.ENODATA: journal.ErrNoData, unix.ERANGE: journal.ErrRange, unix.E2BIG: journal.ErrTooBig,
	unix.EFBIG: journal.ErrFileTooBig, unix.ENOSPC: journal.ErrNoSpace, unix.EMLINK: journal.ErrTooManyLinks,
	unix.EOPNOTSUPP: journal.ErrNotSupported, unix.EBUSY: journal.ErrBusy, unix.ENXIO: journal.ErrNoSeekData,
}

// modelClass names the sentinel a model error wraps.
func modelClass(err error) string {
	if err == nil {
		return "ok"
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "unclassified: " + err.Error()
}

// kernelClass names the sentinel an errno maps to.
func kernelClass(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if s, ok := errnoSentinel[errno]; ok {
			return s.Error()
		}
		return "errno " + errno.Error()
	}
	return "non-errno: " + err.Error()
}

func TestLinux(t *testing.T) {
	testenv.NeedRoot(t, "mounts a tmpfs and runs operations as other users", false)
	old := unix.Umask(0)
	t.Cleanup(func() { unix.Umask(old) })
	seeds := make([]uint64, *linuxRuns)
	for i := range seeds {
		seeds[i] = rand.Uint64()
	}
	if *linuxSeed != 0 {
		seeds = []uint64{*linuxSeed}
	}
	total := 0
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			d := newDiffer(t, seed)
			for range *linuxOps {
				d.step()
			}
			total += d.ran
			t.Logf("seed %d: %d operations (%d as unprivileged callers, %d skipped for permissions); final tree: %d inodes; outcomes:\n\t%v",
				seed, d.ran, d.unprivileged, d.skipped, len(d.m.inodes), d.summary())
		})
	}
	t.Logf("%d operations compared with Linux", total)
}

// differ runs one random sequence on a model and a tmpfs.
type differ struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	mnt  string
	m    *Model
	now  int64

	log          []string
	ran          int
	unprivileged int
	skipped      int
	outcomes     map[string]int

	timed    bool  // the current operation started after a coarse clock tick
	maxStamp int64 // the latest kernel ctime seen

	k2m   map[uint64]journal.Ino // kernel inode -> model inode, as of the last comparison
	prevM map[journal.Ino]journal.Attr
	prevK map[journal.Ino]unix.Stat_t
}

func newDiffer(t *testing.T, seed uint64) *differ {
	mnt := t.TempDir()
	// Let the unprivileged callers reach the mount point.
	if err := os.Chmod(path.Dir(mnt), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOATIME, "size=64m,mode=0755"); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	d := &differ{
		t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), mnt: mnt,
		outcomes: map[string]int{}, k2m: map[uint64]journal.Ino{},
	}
	d.m = New(func() int64 { return d.now }, 2)
	d.compare()
	return d
}

// fail reports a divergence with the seed and the last operations.
func (d *differ) fail(format string, args ...any) {
	d.t.Helper()
	tail := d.log[max(0, len(d.log)-40):]
	repro := ""
	if d.seed != 0 {
		repro = fmt.Sprintf("\nreproduce: go test ./journal/internal/model/ -run 'TestLinux$' -model.linux.seed=%d -model.linux.ops=%d", d.seed, d.ran)
	}
	d.t.Fatalf("seed %d, op %d: %s%s\nlast operations:\n  %s",
		d.seed, d.ran, fmt.Sprintf(format, args...), repro, strings.Join(tail, "\n  "))
}

// abs returns the absolute path of rel, keeping its "." and ".."
// components (path.Join would clean them away).
func (d *differ) abs(rel string) string { return d.mnt + "/" + rel }

// asCaller runs fn with c's credentials. For an unprivileged c it runs fn
// on a fresh OS thread that switches its own credentials with raw system
// calls (which affect only that thread) and then dies with its goroutine.
func asCaller(c journal.Caller, fn func() error) error {
	if c.Privileged() {
		return fn()
	}
	type result struct{ err, setup error }
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		groups := slices.Clone(c.Groups)
		var p uintptr
		if len(groups) > 0 {
			p = uintptr(unsafe.Pointer(&groups[0]))
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), p, 0); e != 0 {
			ch <- result{setup: fmt.Errorf("setgroups: %w", e)}
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(c.GID), uintptr(c.GID), uintptr(c.GID)); e != 0 {
			ch <- result{setup: fmt.Errorf("setresgid: %w", e)}
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(c.UID), uintptr(c.UID), uintptr(c.UID)); e != 0 {
			ch <- result{setup: fmt.Errorf("setresuid: %w", e)}
			return
		}
		ch <- result{err: fn()}
	}()
	r := <-ch
	if r.setup != nil {
		panic(r.setup)
	}
	return r.err
}

// loc is where an inode is found: one of its paths and the directory
// holding that name.
type loc struct {
	path string
	dir  journal.Ino
}

// locs returns a path for every live inode (the first in name order).
func (m *Model) locs() map[journal.Ino]loc {
	out := map[journal.Ino]loc{journal.RootIno: {".", journal.RootIno}}
	var walk func(ino journal.Ino, p string)
	walk = func(ino journal.Ino, p string) {
		d := m.inodes[ino]
		for _, name := range slices.Sorted(maps.Keys(d.entries)) {
			child := d.entries[name]
			if _, seen := out[child]; seen {
				continue
			}
			cp := p + "/" + name
			out[child] = loc{cp, ino}
			if m.inodes[child].attr.Type == journal.TypeDir {
				walk(child, cp)
			}
		}
	}
	walk(journal.RootIno, ".")
	return out
}

// depth is the number of directories above dir.
func (m *Model) depth(dir journal.Ino) int {
	n := 0
	for p := dir; p != journal.RootIno; p = m.inodes[p].parent {
		n++
	}
	return n
}

// permits reports whether Linux's generic_permission grants c the access
// mask (unix.R_OK|W_OK|X_OK) to n.
func permits(c journal.Caller, n *inode, mask uint32) bool {
	if c.Privileged() {
		return true
	}
	mode := n.attr.Mode & 0o777
	switch {
	case c.UID == n.attr.UID:
		mode >>= 6
	case c.InGroup(n.attr.GID):
		mode >>= 3
	}
	return mode&mask == mask
}

// searchable reports whether c may walk from the root down to and into
// dir (search permission on every directory on the way). For a
// non-directory or a missing inode, the walk goes as far as the directory
// holding it (the root for a missing one) and fails there.
func (d *differ) searchable(c journal.Caller, dir journal.Ino) bool {
	n, ok := d.m.inodes[dir]
	switch {
	case !ok:
		dir = journal.RootIno
	case n.attr.Type != journal.TypeDir:
		dir = d.m.locs()[dir].dir
	}
	for p := dir; ; p = d.m.inodes[p].parent {
		if !permits(c, d.m.inodes[p], unix.X_OK) {
			return false
		}
		if p == journal.RootIno {
			return true
		}
	}
}

// canModifyDir reports whether c may add or remove names in dir.
func (d *differ) canModifyDir(c journal.Caller, dir journal.Ino) bool {
	if !d.searchable(c, dir) {
		return false
	}
	n, ok := d.m.inodes[dir]
	return !ok || n.attr.Type != journal.TypeDir || permits(c, n, unix.W_OK|unix.X_OK)
}

// canAccess reports whether c may reach ino (through l) with access mask.
func (d *differ) canAccess(c journal.Caller, ino journal.Ino, l loc, mask uint32) bool {
	if !d.searchable(c, l.dir) {
		return false
	}
	n, ok := d.m.inodes[ino]
	return !ok || permits(c, n, mask)
}

// compareErr checks that the model and the kernel failed alike.
func (d *differ) compareErr(op string, merr, kerr error) {
	d.t.Helper()
	mc, kc := modelClass(merr), kernelClass(kerr)
	if mc != kc {
		d.fail("%s: model says %q (%v), Linux says %q (%v)", op, mc, merr, kc, kerr)
	}
	unpriv := ""
	if !strings.Contains(op, "[uid 0]") {
		unpriv = " (unprivileged)"
	}
	d.outcomes[strings.Fields(op)[3]+": "+mc+unpriv]++
	d.log[len(d.log)-1] += " => " + mc
}

func (d *differ) summary() string {
	keys := slices.Sorted(maps.Keys(d.outcomes))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, d.outcomes[k])
	}
	return strings.Join(parts, "\n\t")
}

var typeOfMode = map[uint32]journal.Type{
	unix.S_IFREG: journal.TypeRegular, unix.S_IFDIR: journal.TypeDir, unix.S_IFLNK: journal.TypeSymlink,
	unix.S_IFIFO: journal.TypeFIFO, unix.S_IFSOCK: journal.TypeSocket, unix.S_IFCHR: journal.TypeCharDev,
	unix.S_IFBLK: journal.TypeBlockDev,
}

// compare checks the whole tree of the model against the tmpfs, and which
// timestamps the last operation changed.
func (d *differ) compare() {
	d.t.Helper()
	ctx := d.t.Context()
	curM := map[journal.Ino]journal.Attr{}
	curK := map[journal.Ino]unix.Stat_t{}
	k2m := map[uint64]journal.Ino{}
	var walk func(ino journal.Ino, rel string)
	walk = func(ino journal.Ino, rel string) {
		a, err := d.m.GetAttr(ctx, ino)
		if err != nil {
			d.fail("model: %s (inode %d) listed but GetAttr: %v", rel, ino, err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(d.abs(rel), &st); err != nil {
			d.fail("%s: in the model (inode %d), Linux: %v", rel, ino, err)
		}
		if prev, ok := k2m[st.Ino]; ok && prev != ino {
			d.fail("%s: Linux inode %d is model inodes %d and %d", rel, st.Ino, prev, ino)
		}
		if _, seen := curM[ino]; seen {
			if k := curK[ino]; k.Ino != st.Ino {
				d.fail("%s: model inode %d is Linux inodes %d and %d (hard links differ)", rel, ino, k.Ino, st.Ino)
			}
			return
		}
		k2m[st.Ino] = ino
		curM[ino], curK[ino] = a, st
		d.maxStamp = max(d.maxStamp, st.Ctim.Nano()) // atime and mtime may be set explicitly
		d.compareAttr(rel, a, st)
		switch a.Type {
		case journal.TypeDir:
			ents, err := d.m.ReadDir(ctx, ino)
			if err != nil {
				d.fail("model ReadDir %s: %v", rel, err)
			}
			kents, err := os.ReadDir(d.abs(rel))
			if err != nil {
				d.fail("Linux readdir %s: %v", rel, err)
			}
			var mnames, knames []string
			for _, e := range ents {
				mnames = append(mnames, e.Name)
			}
			for _, e := range kents {
				knames = append(knames, e.Name())
			}
			if !slices.Equal(mnames, knames) {
				d.fail("readdir %s: model %q, Linux %q", rel, mnames, knames)
			}
			for _, e := range ents {
				if e.Type != d.m.inodes[e.Ino].attr.Type {
					d.fail("readdir %s: entry %s has type %v, its inode %v", rel, e.Name, e.Type, d.m.inodes[e.Ino].attr.Type)
				}
				walk(e.Ino, rel+"/"+e.Name)
			}
		case journal.TypeRegular:
			got := make([]byte, a.Size+1)
			n, err := d.m.Read(ctx, ino, got, 0)
			if err != nil {
				d.fail("model read %s: %v", rel, err)
			}
			want, err := os.ReadFile(d.abs(rel))
			if err != nil {
				d.fail("Linux read %s: %v", rel, err)
			}
			if !bytes.Equal(got[:n], want) {
				d.fail("content of %s differs: model %d bytes, Linux %d bytes, first difference at %d",
					rel, n, len(want), firstDiff(got[:n], want))
			}
		case journal.TypeSymlink:
			target, err := d.m.Readlink(ctx, ino)
			if err != nil {
				d.fail("model readlink %s: %v", rel, err)
			}
			buf := make([]byte, 8192)
			kn, err := unix.Readlink(d.abs(rel), buf)
			if err != nil || string(buf[:kn]) != target {
				d.fail("readlink %s: model %q, Linux %q (%v)", rel, target, buf[:max(kn, 0)], err)
			}
		}
		d.compareXattrs(rel, ino)
	}
	walk(journal.RootIno, ".")
	if len(curM) != len(d.m.inodes) {
		d.fail("model has %d inodes, %d reachable from the root", len(d.m.inodes), len(curM))
	}
	for ino, a := range curM {
		pa, ok := d.prevM[ino]
		if !ok {
			continue
		}
		st, pst := curK[ino], d.prevK[ino]
		for _, tc := range []struct {
			name       string
			mNew, mOld int64
			kNew, kOld unix.Timespec
		}{
			{"atime", a.Atime, pa.Atime, st.Atim, pst.Atim},
			{"mtime", a.Mtime, pa.Mtime, st.Mtim, pst.Mtim},
			{"ctime", a.Ctime, pa.Ctime, st.Ctim, pst.Ctim},
		} {
			// Untimed, Linux may give an update the timestamp it
			// gave the last one: only Linux's changes must be in the
			// model.
			if mc, kc := tc.mNew != tc.mOld, tc.kNew != tc.kOld; mc != kc && (d.timed || kc) {
				d.fail("inode %d (%s): %s changed in the model: %v (%d -> %d), in Linux: %v (%d -> %d); Linux ctime %d -> %d",
					ino, a.Type, tc.name, mc, tc.mOld, tc.mNew, kc, tc.kOld.Nano(), tc.kNew.Nano(), pst.Ctim.Nano(), st.Ctim.Nano())
			}
		}
	}
	d.prevM, d.prevK, d.k2m = curM, curK, k2m
}

// waitTick waits until the coarse real-time clock, which Linux reads for
// timestamps, has passed every timestamp seen.
func (d *differ) waitTick() {
	for {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
			d.t.Fatal(err)
		}
		if ts.Nano() > d.maxStamp {
			return
		}
		time.Sleep(time.Duration(d.maxStamp-ts.Nano()) + 100*time.Microsecond)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func (d *differ) compareAttr(rel string, a journal.Attr, st unix.Stat_t) {
	d.t.Helper()
	kt := typeOfMode[st.Mode&unix.S_IFMT]
	type field struct {
		name string
		m, k uint64
	}
	fields := []field{
		{"type", uint64(a.Type), uint64(kt)},
		{"mode", uint64(a.Mode), uint64(st.Mode & 0o7777)},
		{"uid", uint64(a.UID), uint64(st.Uid)},
		{"gid", uint64(a.GID), uint64(st.Gid)},
		{"nlink", uint64(a.Nlink), uint64(st.Nlink)},
	}
	if a.Type != journal.TypeDir {
		fields = append(fields, field{"size", a.Size, uint64(st.Size)})
	}
	if a.Type == journal.TypeCharDev || a.Type == journal.TypeBlockDev {
		fields = append(fields, field{"rdev", a.Rdev, st.Rdev})
	}
	for _, f := range fields {
		if f.m != f.k {
			d.fail("%s (inode %d): %s: model %#o, Linux %#o", rel, a.Ino, f.name, f.m, f.k)
		}
	}
}

func (d *differ) compareXattrs(rel string, ino journal.Ino) {
	d.t.Helper()
	ctx := d.t.Context()
	mnames, err := d.m.ListXattr(ctx, ino)
	if err != nil {
		d.fail("model listxattr %s: %v", rel, err)
	}
	buf := make([]byte, 1<<17)
	n, err := unix.Llistxattr(d.abs(rel), buf)
	if err != nil {
		d.fail("Linux listxattr %s: %v", rel, err)
	}
	var knames []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			knames = append(knames, s)
		}
	}
	slices.Sort(knames)
	if !slices.Equal(mnames, knames) {
		d.fail("xattrs of %s: model %q, Linux %q", rel, mnames, knames)
	}
	for _, name := range mnames {
		mv, err := d.m.GetXattr(ctx, ino, name)
		if err != nil {
			d.fail("model getxattr %s %s: %v", rel, name, err)
		}
		kn, err := unix.Lgetxattr(d.abs(rel), name, buf)
		if err != nil || !bytes.Equal(mv, buf[:kn]) {
			d.fail("xattr %s of %s: model %d bytes, Linux %d bytes (%v)", name, rel, len(mv), kn, err)
		}
	}
}
