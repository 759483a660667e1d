package fs

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/journal"
)

// Options configure a served journal.
type Options struct {
	// Timeout is how long the kernel may cache entries, negative lookups
	// and attributes. The daemon is the only writer, and invalidates what
	// it changes by itself; default one hour.
	Timeout time.Duration
	// NoPassthrough disables FUSE passthrough (all I/O through the daemon).
	NoPassthrough bool
	// Logf receives messages for operators. Default: none.
	Logf func(format string, args ...any)

	// IDMap lets the mount be bound id-mapped (mount_setattr
	// MOUNT_ATTR_IDMAP), as a sandbox binds its workspace: the server
	// declares FUSE_ALLOW_IDMAP, which the kernel accepts from Linux 6.12
	// (on older kernels the mount serves as without it, and id-mapped
	// binds are refused: see IDMapped). The kernel then sends the caller's
	// ids only in requests that create an inode; the others get theirs
	// from /proc (see the package documentation). Default: off.
	IDMap bool
	// IDMapBase and IDMapSize are the host ids of the sandboxes' user
	// namespaces: host id IDMapBase+n is a sandbox's id n, stored as n.
	// Used with IDMap only. Defaults: 100000 and 65536, the sandbox
	// package's DefaultHostIDBase and IDMapSize.
	IDMapBase, IDMapSize uint32

	// Transport is how the kernel's requests reach the daemon (see
	// Transport): "" is TransportDefault.
	Transport Transport
}

// Defaults of Options.IDMapBase and Options.IDMapSize: the host ids the
// sandbox package maps its user namespaces to by default.
const (
	DefaultIDMapBase = 100000
	DefaultIDMapSize = 65536
)

// Validate reports options that cannot work: an id range past the largest
// id (4294967294).
func (o Options) Validate() error {
	o.setDefaults()
	if uint64(o.IDMapBase)+uint64(o.IDMapSize) > uint64(invalidID) {
		return fmt.Errorf("%w: id range %d+%d passes the largest id", ErrInvalid, o.IDMapBase, o.IDMapSize)
	}
	return nil
}

func (o *Options) setDefaults() {
	if o.Timeout == 0 {
		o.Timeout = time.Hour
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.IDMapBase == 0 {
		o.IDMapBase = DefaultIDMapBase
	}
	if o.IDMapSize == 0 {
		o.IDMapSize = DefaultIDMapSize
	}
}

// FS is a journal served over FUSE. Its methods are go-fuse's raw protocol
// calls; NewServer mounts it.
type FS struct {
	fuse.RawFileSystem // ENOSYS for what is not here (locks: the kernel's own)

	j       *journal.Journal
	opts    Options
	server  *fuse.Server
	creds   credsCache
	lookups map[journal.Ino]uint64 // kernel lookup counts, for invalidation; under mu (a sync.Map cost 120 bytes an inode)

	mu          sync.Mutex
	nextFh      uint64
	files       map[uint64]*openFile
	dirs        map[uint64]*openDir
	dirState    map[journal.Ino]*dirState // of the directories open
	allChanges  uint64                    // InvalidateAll calls: every directory changed
	backing     map[backingKey]*backingRef
	passthrough bool // false once registering a backing file failed
	ioLog       ioLog
	// cachedWriters counts the open handles that allow writing without
	// passthrough (see KernelMayHoldWrites).
	cachedWriters int
	// flushers are the pids of the flush helpers at work (FlushHelper).
	flushers map[int]int
}

// backingKey names a backing file: an inode number names another file
// after a rollback (journal.Generation).
type backingKey struct {
	ino journal.Ino
	gen uint64
}

type openFile struct {
	h       *journal.Handle
	backing bool // registered as the inode's backing file
	// cachedWrite: opened for writing without passthrough, so a shared
	// mapping of it dirties pages in the kernel's page cache.
	cachedWrite bool
}

// backingRef is a backing file registered with the kernel for an inode
// (one per inode, shared by its handles).
type backingRef struct {
	id   int32
	refs int
}

// New returns j served over FUSE (not mounted yet: see Mount).
func New(j *journal.Journal, opts Options) *FS {
	opts.setDefaults()
	return &FS{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		j:             j,
		opts:          opts,
		files:         make(map[uint64]*openFile),
		dirs:          make(map[uint64]*openDir),
		dirState:      make(map[journal.Ino]*dirState),
		backing:       make(map[backingKey]*backingRef),
		lookups:       make(map[journal.Ino]uint64),
		passthrough:   !opts.NoPassthrough,
	}
}

// String implements fuse.RawFileSystem.
func (f *FS) String() string { return "cairn" }

// Init implements fuse.RawFileSystem.
func (f *FS) Init(s *fuse.Server) { f.server = s }

// ctx returns a context cancelled when the kernel interrupts the request:
// its Done is the request's cancel channel itself, so a request costs no
// goroutine to watch it (SETATTR is a third of the requests of tar -x).
func ctx(cancel <-chan struct{}) (context.Context, func()) {
	return reqCtx{cancel}, func() {}
}

// reqCtx is a context done when its channel is closed.
type reqCtx struct{ cancel <-chan struct{} }

func (reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c reqCtx) Done() <-chan struct{}     { return c.cancel }
func (reqCtx) Value(any) any               { return nil }

func (c reqCtx) Err() error {
	select {
	case <-c.cancel:
		return context.Canceled
	default:
		return nil
	}
}

// bg is the context of requests that are not worth a goroutine to cancel.
var bg = context.Background()

func ino(id uint64) journal.Ino { return journal.Ino(id) }

func fillAttr(a journal.Attr, out *fuse.Attr) {
	out.Ino = uint64(a.Ino)
	out.Size = a.Size
	out.Blocks = (a.Size + 511) / 512
	out.Atime, out.Atimensec = split(a.Atime)
	out.Mtime, out.Mtimensec = split(a.Mtime)
	out.Ctime, out.Ctimensec = split(a.Ctime)
	out.Mode = typeBits(a.Type) | a.Mode&journal.ModePerm
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.Rdev = encodeDev(a.Rdev)
	out.Blksize = 4096
}

func split(ns int64) (uint64, uint32) {
	s, n := ns/1e9, ns%1e9
	if n < 0 {
		s, n = s-1, n+1e9
	}
	return uint64(s), uint32(n)
}

func join(s uint64, n uint32) int64 { return int64(s)*1e9 + int64(n) }

// The kernel sends device numbers in its 32-bit encoding (new_encode_dev);
// the journal keeps st_rdev's (what stat and tar see).
func decodeDev(d uint32) uint64 {
	return unix.Mkdev((d&0xfff00)>>8, d&0xff|(d>>12)&0xfff00)
}

func encodeDev(d uint64) uint32 {
	major, minor := unix.Major(d), unix.Minor(d)
	return minor&0xff | major&0xfff<<8 | (minor&^0xff)<<12
}

func typeBits(t journal.Type) uint32 {
	switch t {
	case journal.TypeDir:
		return syscall.S_IFDIR
	case journal.TypeSymlink:
		return syscall.S_IFLNK
	case journal.TypeFIFO:
		return syscall.S_IFIFO
	case journal.TypeSocket:
		return syscall.S_IFSOCK
	case journal.TypeCharDev:
		return syscall.S_IFCHR
	case journal.TypeBlockDev:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

func typeOf(mode uint32) (journal.Type, bool) {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, 0:
		return journal.TypeRegular, true
	case syscall.S_IFIFO:
		return journal.TypeFIFO, true
	case syscall.S_IFSOCK:
		return journal.TypeSocket, true
	case syscall.S_IFCHR:
		return journal.TypeCharDev, true
	case syscall.S_IFBLK:
		return journal.TypeBlockDev, true
	}
	return 0, false
}

// entry fills a lookup reply and counts the kernel's reference. gen is the
// journal's Generation read before the journal call that gave a: after a
// rollback, the kernel replaces an inode it holds under the same number
// (one kept by an open file) by a new one, instead of serving the old
// one's pages and backing file for the new state's file. (The root is the
// root in every state, and its generation the kernel's 0.)
func (f *FS) entry(a journal.Attr, out *fuse.EntryOut, gen uint64) {
	out.NodeId = uint64(a.Ino)
	out.Generation = 0
	if a.Ino != journal.RootIno {
		out.Generation = gen
	}
	fillAttr(a, &out.Attr)
	out.SetEntryTimeout(f.opts.Timeout)
	out.SetAttrTimeout(f.opts.Timeout)
	f.mu.Lock()
	f.lookups[a.Ino]++
	f.mu.Unlock()
}

// Lookup implements fuse.RawFileSystem. A missing name is cached by the
// kernel as a negative entry.
func (f *FS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	gen := f.j.Generation()
	a, err := f.j.Lookup(bg, ino(h.NodeId), name)
	if Errno(err) == syscall.ENOENT {
		out.NodeId = 0
		out.SetEntryTimeout(f.opts.Timeout)
		return fuse.OK
	}
	if err != nil {
		return f.status(err)
	}
	f.entry(a, out, gen)
	return fuse.OK
}

// Forget implements fuse.RawFileSystem.
func (f *FS) Forget(nodeid, nlookup uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.lookups[ino(nodeid)]; ok && c <= nlookup {
		delete(f.lookups, ino(nodeid))
	} else if ok {
		f.lookups[ino(nodeid)] = c - nlookup
	}
}

// GetAttr implements fuse.RawFileSystem.
func (f *FS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.Flags()&fuse.FUSE_GETATTR_FH != 0 && f.stale(in.Fh()) {
		return fuse.Status(syscall.ESTALE)
	}
	a, err := f.j.GetAttr(bg, ino(in.NodeId))
	if Errno(err) == syscall.ENOENT {
		// The kernel asks only about inodes it was given: one that is gone
		// was dropped under it by a rollback (a path-based stat retries
		// the lookup on ESTALE).
		return fuse.Status(syscall.ESTALE)
	}
	if err != nil {
		return f.status(err)
	}
	fillAttr(a, &out.Attr)
	out.SetTimeout(f.opts.Timeout)
	return fuse.OK
}

// SetAttr implements fuse.RawFileSystem.
func (f *FS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if fh, ok := in.GetFh(); ok && f.stale(fh) {
		return fuse.Status(syscall.ESTALE)
	}
	var s journal.SetAttrIn
	v := in.Valid
	if v&fuse.FATTR_MODE != 0 {
		s.Valid |= journal.SetMode
		s.Mode = in.Mode & journal.ModePerm
	}
	if v&fuse.FATTR_UID != 0 {
		s.Valid |= journal.SetUID
		s.UID = in.Uid
	}
	if v&fuse.FATTR_GID != 0 {
		s.Valid |= journal.SetGID
		s.GID = in.Gid
	}
	if v&fuse.FATTR_SIZE != 0 {
		s.Valid |= journal.SetSize
		s.Size = in.Size
	}
	switch {
	case v&fuse.FATTR_ATIME_NOW != 0:
		s.Valid |= journal.SetAtimeNow
	case v&fuse.FATTR_ATIME != 0:
		s.Valid |= journal.SetAtime
		s.Atime = join(in.Atime, in.Atimensec)
	}
	switch {
	case v&fuse.FATTR_MTIME_NOW != 0:
		s.Valid |= journal.SetMtimeNow
	case v&fuse.FATTR_MTIME != 0:
		s.Valid |= journal.SetMtime
		s.Mtime = join(in.Mtime, in.Mtimensec)
	}
	if v&fuse.FATTR_CTIME != 0 {
		s.Valid |= journal.SetCtime
		s.Ctime = join(in.Ctime, in.Ctimensec)
	}
	// Only chmod, chown and truncate depend on who asks (utimensat's
	// permission is the kernel's to check).
	who := nobody
	if s.Valid&(journal.SetMode|journal.SetUID|journal.SetGID|journal.SetSize) != 0 {
		who = f.caller(&in.InHeader, true)
	}
	c, stop := ctx(cancel)
	defer stop()
	a, err := f.j.SetAttr(c, who, ino(in.NodeId), s)
	if err != nil {
		return f.status(err)
	}
	fillAttr(a, &out.Attr)
	out.SetTimeout(f.opts.Timeout)
	return fuse.OK
}

// Mknod implements fuse.RawFileSystem.
func (f *FS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	t, ok := typeOf(in.Mode)
	if !ok {
		return fuse.EINVAL
	}
	gen := f.j.Generation()
	a, err := f.j.Mknod(bg, f.caller(&in.InHeader, true), ino(in.NodeId), name, t, in.Mode&journal.ModePerm, decodeDev(in.Rdev))
	if err != nil {
		return f.status(err)
	}
	f.changed(ino(in.NodeId))
	f.entry(a, out, gen)
	return fuse.OK
}

// Mkdir implements fuse.RawFileSystem.
func (f *FS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	gen := f.j.Generation()
	a, err := f.j.Mkdir(bg, f.caller(&in.InHeader, true), ino(in.NodeId), name, in.Mode&journal.ModePerm)
	if err != nil {
		return f.status(err)
	}
	f.changed(ino(in.NodeId))
	f.entry(a, out, gen)
	return fuse.OK
}

// Unlink implements fuse.RawFileSystem.
func (f *FS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	err := f.j.Unlink(bg, f.caller(h, false), ino(h.NodeId), name)
	if err == nil {
		f.changed(ino(h.NodeId))
	}
	return f.status(err)
}

// Rmdir implements fuse.RawFileSystem.
func (f *FS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	err := f.j.Rmdir(bg, f.caller(h, false), ino(h.NodeId), name)
	if err == nil {
		f.changed(ino(h.NodeId))
	}
	return f.status(err)
}

// Rename implements fuse.RawFileSystem.
func (f *FS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	const known = uint32(journal.RenameNoReplace | journal.RenameExchange)
	if in.Flags&^known != 0 {
		return fuse.EINVAL // RENAME_WHITEOUT: overlayfs only
	}
	err := f.j.Rename(bg, f.caller(&in.InHeader, false), ino(in.NodeId), oldName, ino(in.Newdir), newName, journal.RenameFlags(in.Flags))
	if err == nil {
		f.changed(ino(in.NodeId), ino(in.Newdir))
	}
	return f.status(err)
}

// Link implements fuse.RawFileSystem.
func (f *FS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	gen := f.j.Generation()
	a, err := f.j.Link(bg, f.caller(&in.InHeader, false), ino(in.Oldnodeid), ino(in.NodeId), name)
	if err != nil {
		return f.status(err)
	}
	f.changed(ino(in.NodeId))
	f.entry(a, out, gen)
	return fuse.OK
}

// Symlink implements fuse.RawFileSystem.
func (f *FS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	gen := f.j.Generation()
	a, err := f.j.Symlink(bg, f.caller(h, true), ino(h.NodeId), name, target)
	if err != nil {
		return f.status(err)
	}
	f.changed(ino(h.NodeId))
	f.entry(a, out, gen)
	return fuse.OK
}

// Readlink implements fuse.RawFileSystem.
func (f *FS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	t, err := f.j.Readlink(bg, ino(h.NodeId))
	if err != nil {
		return nil, f.status(err)
	}
	return []byte(t), fuse.OK
}

// GetXAttr implements fuse.RawFileSystem.
func (f *FS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, name string, dest []byte) (uint32, fuse.Status) {
	v, err := f.j.GetXattr(bg, ino(h.NodeId), name)
	if err != nil {
		return 0, f.status(err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), fuse.ERANGE
	}
	return uint32(copy(dest, v)), fuse.OK
}

// ListXAttr implements fuse.RawFileSystem.
func (f *FS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	names, err := f.j.ListXattr(bg, ino(h.NodeId))
	if err != nil {
		return 0, f.status(err)
	}
	var b []byte
	for _, n := range names {
		b = append(append(b, n...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), fuse.ERANGE
	}
	return uint32(copy(dest, b)), fuse.OK
}

// SetXAttr implements fuse.RawFileSystem.
func (f *FS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, name string, data []byte) fuse.Status {
	return f.status(f.j.SetXattr(bg, f.caller(&in.InHeader, true), ino(in.NodeId), name, data, journal.XattrFlags(in.Flags)))
}

// RemoveXAttr implements fuse.RawFileSystem.
func (f *FS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return f.status(f.j.RemoveXattr(bg, f.caller(h, true), ino(h.NodeId), name))
}

// Create implements fuse.RawFileSystem: the file is made and opened in
// one journal call (one transaction, one open of its staging file).
func (f *FS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	gen := f.j.Generation()
	write := in.Flags&syscall.O_ACCMODE != syscall.O_RDONLY
	a, h, err := f.j.CreateOpen(bg, f.caller(&in.InHeader, true), ino(in.NodeId), name, in.Mode&journal.ModePerm, write, f.wantBacking())
	if err != nil {
		return f.status(err)
	}
	f.changed(ino(in.NodeId))
	f.opened(h, write, &out.OpenOut)
	f.entry(a, &out.EntryOut, gen)
	return fuse.OK
}

// Open implements fuse.RawFileSystem.
func (f *FS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	write := in.Flags&syscall.O_ACCMODE != syscall.O_RDONLY
	h, err := f.j.Open(bg, journal.Root, ino(in.NodeId), write, f.wantBacking())
	if err != nil {
		return f.status(err)
	}
	f.opened(h, write, out)
	return fuse.OK
}

// wantBacking reports whether opens should ask for backing files.
func (f *FS) wantBacking() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.passthrough
}

// opened registers h, opened for writing or not, and fills the reply.
func (f *FS) opened(h *journal.Handle, write bool, out *fuse.OpenOut) {
	n := h.Ino
	of := &openFile{h: h}
	key := backingKey{n, h.Generation()}
	f.mu.Lock()
	defer f.mu.Unlock()
	if bf := h.Backing(); bf != nil && f.passthrough {
		ref := f.backing[key]
		if ref == nil {
			id, errno := f.server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(bf.Fd())})
			if errno != 0 {
				f.passthrough = false
				f.opts.Logf("cairn: FUSE passthrough is not available (%v); all I/O goes through the daemon", errno)
			} else {
				ref = &backingRef{id: id}
				f.backing[key] = ref
			}
		}
		if ref != nil {
			ref.refs++
			of.backing = true
			out.BackingID = ref.id
			out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
		}
	}
	if !of.backing {
		if f.passthrough || f.backing[key] != nil {
			// The kernel refuses cached I/O on an inode that others
			// access by passthrough: go around the page cache.
			out.OpenFlags |= fuse.FOPEN_DIRECT_IO
		} else {
			out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
		}
	}
	if write && !of.backing {
		of.cachedWrite = true
		f.cachedWriters++
	}
	// Nothing to do at close(2): writes are in the journal (or in the
	// backing file) already. This saves a round trip on every close.
	out.OpenFlags |= fuse.FOPEN_NOFLUSH
	f.nextFh++
	out.Fh = f.nextFh
	f.files[out.Fh] = of
}

// stale reports whether handle fh was opened before a forced rollback: it
// gets ESTALE, never the bytes of whatever file now has its inode number.
// (A passthrough handle's I/O never reaches the daemon: it keeps reading
// and writing the discarded file's staging copy until closed.)
func (f *FS) stale(fh uint64) bool {
	f.mu.Lock()
	of := f.files[fh]
	f.mu.Unlock()
	return of != nil && f.j.Stale(of.h)
}

// Release implements fuse.RawFileSystem.
func (f *FS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	f.mu.Lock()
	of := f.files[in.Fh]
	delete(f.files, in.Fh)
	if of != nil && of.cachedWrite {
		f.cachedWriters--
	}
	if of != nil && of.backing {
		key := backingKey{of.h.Ino, of.h.Generation()}
		if ref := f.backing[key]; ref != nil {
			if ref.refs--; ref.refs == 0 {
				delete(f.backing, key)
				if errno := f.server.UnregisterBackingFd(ref.id); errno != 0 {
					f.opts.Logf("cairn: release backing file of inode %d: %v", of.h.Ino, errno)
				}
			}
		}
	}
	f.mu.Unlock()
	if of != nil {
		if err := f.j.Release(bg, of.h); err != nil {
			f.opts.Logf("cairn: release inode %d: %v", of.h.Ino, err)
		}
	}
}

// Read implements fuse.RawFileSystem (files without passthrough).
func (f *FS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if f.stale(in.Fh) {
		return nil, fuse.Status(syscall.ESTALE)
	}
	c, stop := ctx(cancel)
	defer stop()
	n, err := f.j.Read(c, ino(in.NodeId), buf[:min(len(buf), int(in.Size))], int64(in.Offset))
	if err != nil {
		return nil, f.status(err)
	}
	return fuse.ReadResultData(buf[:n]), fuse.OK
}

// Write implements fuse.RawFileSystem (files without passthrough).
func (f *FS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if f.stale(in.Fh) {
		return 0, fuse.Status(syscall.ESTALE)
	}
	n, err := f.j.Write(bg, f.caller(&in.InHeader, true), ino(in.NodeId), data, int64(in.Offset))
	if err != nil && n == 0 {
		return 0, f.status(err)
	}
	return uint32(n), fuse.OK
}

// Lseek implements fuse.RawFileSystem: SEEK_DATA and SEEK_HOLE (the
// kernel does the others).
func (f *FS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if f.stale(in.Fh) {
		return fuse.Status(syscall.ESTALE)
	}
	off, err := f.j.Lseek(bg, ino(in.NodeId), int64(in.Offset), int(in.Whence))
	if err != nil {
		return f.status(err)
	}
	out.Offset = uint64(off)
	return fuse.OK
}

// Flush implements fuse.RawFileSystem: writes are in the journal already.
// (Opens set FOPEN_NOFLUSH, so the kernel sends no FLUSH for them.)
func (f *FS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status { return fuse.OK }

// Fsync implements fuse.RawFileSystem. A flush helper's FSYNC is
// answered at once (see FlushHelper).
func (f *FS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if f.stale(in.Fh) {
		return fuse.Status(syscall.ESTALE)
	}
	if f.fromFlusher(in.Pid) {
		return fuse.OK
	}
	return f.status(f.j.Fsync(bg, ino(in.NodeId), in.FsyncFlags&1 != 0))
}

// FsyncDir implements fuse.RawFileSystem.
func (f *FS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return f.status(f.j.Fsync(bg, ino(in.NodeId), false))
}

// Fallocate implements fuse.RawFileSystem.
func (f *FS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if f.stale(in.Fh) {
		return fuse.Status(syscall.ESTALE)
	}
	return f.status(f.j.Fallocate(bg, f.caller(&in.InHeader, true), ino(in.NodeId), journal.FallocMode(in.Mode), int64(in.Offset), int64(in.Length)))
}

// CopyFileRange implements fuse.RawFileSystem.
func (f *FS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	if f.stale(in.FhIn) || f.stale(in.FhOut) {
		return 0, fuse.Status(syscall.ESTALE)
	}
	if in.Flags != 0 {
		return 0, fuse.EINVAL
	}
	n, err := f.j.CopyFileRange(bg, f.caller(&in.InHeader, true), ino(in.NodeId), int64(in.OffIn), ino(in.NodeIdOut), int64(in.OffOut), int64(min(in.Len, 1<<30)))
	if err != nil && n == 0 {
		return 0, f.status(err)
	}
	return uint32(n), fuse.OK
}

// StatFs implements fuse.RawFileSystem.
func (f *FS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	s, err := f.j.StatFs(bg)
	if err != nil {
		return f.status(err)
	}
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bavail
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.Frsize, out.NameLen = s.Bsize, s.Bsize, s.NameLen
	return fuse.OK
}

// Directories. The kernel caches a directory's listing (FOPEN_CACHE_DIR,
// kept across opens with FOPEN_KEEP_CACHE) in one cache per inode, which it
// fills from the READDIR replies of whichever handle reads while the cache
// is incomplete, and restarts when it sees the directory change: at an
// opendir or rewinddir after a create, unlink, rename or link through the
// mount (which bumps the inode's i_version), or once its pages are gone
// (InvalidateInode, InvalidateAll, after a restore or rollback). So each
// reply must be the directory as it is now, at whatever offset, whichever
// handle asks: a handle's listing is read again at offset 0 and whenever
// the directory changed since it was read (openDir.seen), and offsets are
// cookies derived from the names (dirCookies), which stay valid across
// listings, so that a reader between two listings neither skips nor
// repeats a name that was there all along.

// openDir is an open directory handle.
type openDir struct {
	ino  journal.Ino
	ents []dirEnt // nil: not read yet
	seen uint64   // dirVersion when ents were read
}

// dirEnt is a directory entry and its offset.
type dirEnt struct {
	journal.DirEntry
	off uint64
}

// dirState counts the changes of an open directory.
type dirState struct {
	handles int
	changes uint64
}

// changed records that the entries of directories dirs changed, so that
// their open handles read them again (see openDir).
func (f *FS) changed(dirs ...journal.Ino) {
	f.mu.Lock()
	for _, d := range dirs {
		if s := f.dirState[d]; s != nil {
			s.changes++
		}
	}
	f.mu.Unlock()
}

// dirVersionLocked is a number that changes whenever directory d does
// (while it is open).
func (f *FS) dirVersionLocked(d journal.Ino) uint64 {
	v := f.allChanges
	if s := f.dirState[d]; s != nil {
		v += s.changes
	}
	return v
}

// The offsets of "." and ".."; an entry's offset (its cookie) is larger.
const (
	offDot    = 1
	offDotDot = 2
)

// dirCookies sorts ents by cookie, the offset of each: 54 bits of the
// FNV-1a hash of its name, shifted left by 8, plus 256. Names whose hashes
// collide (or come within 256 of one another) are ordered by name and take
// the next free cookies; only a change among such names can make a reader
// miss or repeat one (about one directory in 2^27 of 10,000 names has any).
func dirCookies(ents []journal.DirEntry) []dirEnt {
	out := make([]dirEnt, len(ents))
	for i, e := range ents {
		h := uint64(14695981039346656037)
		for k := 0; k < len(e.Name); k++ {
			h ^= uint64(e.Name[k])
			h *= 1099511628211
		}
		out[i] = dirEnt{e, (h>>10)<<8 + 256}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].off != out[b].off {
			return out[a].off < out[b].off
		}
		return out[a].Name < out[b].Name
	})
	for i := 1; i < len(out); i++ {
		out[i].off = max(out[i].off, out[i-1].off+1)
	}
	return out
}

// OpenDir implements fuse.RawFileSystem. The listing is read at the first
// READDIR (none comes while the kernel's cache of the directory is valid).
func (f *FS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	d := ino(in.NodeId)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextFh++
	out.Fh = f.nextFh
	out.OpenFlags |= fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	f.dirs[out.Fh] = &openDir{ino: d}
	s := f.dirState[d]
	if s == nil {
		s = &dirState{}
		f.dirState[d] = s
	}
	s.handles++
	return fuse.OK
}

// ReleaseDir implements fuse.RawFileSystem.
func (f *FS) ReleaseDir(in *fuse.ReleaseIn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	od := f.dirs[in.Fh]
	if od == nil {
		return
	}
	delete(f.dirs, in.Fh)
	if s := f.dirState[od.ino]; s != nil {
		if s.handles--; s.handles <= 0 {
			delete(f.dirState, od.ino)
		}
	}
}

// ReadDir implements fuse.RawFileSystem.
func (f *FS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, false)
}

// ReadDirPlus implements fuse.RawFileSystem: entries with attributes, so
// that `ls -l` costs no lookups.
func (f *FS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, true)
}

// listing returns the entries of handle fh as the directory is now.
func (f *FS) listing(fh uint64, offset uint64) ([]dirEnt, journal.Ino, fuse.Status) {
	f.mu.Lock()
	od := f.dirs[fh]
	if od == nil {
		f.mu.Unlock()
		return nil, 0, fuse.EBADF
	}
	v := f.dirVersionLocked(od.ino)
	ents := od.ents
	fresh := ents != nil && offset != 0 && od.seen == v
	f.mu.Unlock()
	if fresh {
		return ents, od.ino, fuse.OK
	}
	// The kernel sends one READDIR at a time per handle: od is ours.
	list, err := f.j.ReadDir(bg, od.ino)
	if err != nil {
		return nil, 0, f.status(err)
	}
	ents = dirCookies(list)
	f.mu.Lock()
	od.ents, od.seen = ents, v
	f.mu.Unlock()
	return ents, od.ino, fuse.OK
}

func (f *FS) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	gen := f.j.Generation()
	ents, dir, st := f.listing(in.Fh, in.Offset)
	if st != fuse.OK {
		return st
	}
	if in.Offset < offDot {
		e := fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: uint64(dir), Off: offDot}
		if !f.addDot(out, e, plus) {
			return fuse.OK
		}
	}
	if in.Offset < offDotDot {
		e := fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Off: offDotDot}
		if !f.addDot(out, e, plus) {
			return fuse.OK
		}
	}
	// The first entry past the offset; with plus, the attributes come
	// from the journal in batches (LookupAll) of the entries that may fit
	// in the kernel's buffer.
	start := sort.Search(len(ents), func(i int) bool { return ents[i].off > in.Offset })
	var attrs []journal.Attr
	var errs []error
	batchStart := start
	for i := start; i < len(ents); i++ {
		d := &ents[i]
		e := fuse.DirEntry{Name: d.Name, Mode: typeBits(d.Type), Ino: uint64(d.Ino), Off: d.off}
		if !plus {
			if !out.AddDirEntry(e) {
				break
			}
			continue
		}
		eo := out.AddDirLookupEntry(e)
		if eo == nil {
			break
		}
		if attrs == nil || i >= batchStart+len(attrs) {
			// A READDIRPLUS entry takes at least 152 bytes of the buffer.
			n := min(len(ents)-i, int(in.Size)/152+1)
			names := make([]string, n)
			for k := range names {
				names[k] = ents[i+k].Name
			}
			var err error
			if attrs, errs, err = f.j.LookupAll(bg, dir, names); err != nil {
				return f.status(err)
			}
			batchStart = i
		}
		if errs[i-batchStart] != nil {
			*eo = fuse.EntryOut{} // gone since the listing was read: no entry
			continue
		}
		f.entry(attrs[i-batchStart], eo, gen)
	}
	return fuse.OK
}

// addDot adds "." or "..", which the kernel does not look up (no
// attributes with plus).
func (f *FS) addDot(out *fuse.DirEntryList, e fuse.DirEntry, plus bool) bool {
	if !plus {
		return out.AddDirEntry(e)
	}
	return out.AddDirLookupEntry(e) != nil
}

// Passthrough reports whether FUSE passthrough is in use (false if it was
// turned off, or registering a backing file failed).
func (f *FS) Passthrough() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.passthrough
}
