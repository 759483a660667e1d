package journal

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cairnfs/cairn/journal/internal/metalog"
)

// Open files. The FUSE layer opens a regular file through the journal and
// gets a Handle, which may carry a backing file: the inode's staging file,
// which the kernel then reads and writes directly (FUSE passthrough). Such
// writes bypass the journal, so:
//
//   - a file opened for writing with a backing file is staged and dirty
//     before Open returns, and stays dirty across snapshots while open;
//   - while it is open, its size and mtime come from the staging file: an
//     operation on such a file (stat, lookup, read, write, setattr, fsync,
//     ...) first brings its record up to date (adopt), one that reads every
//     size (snapshot, status, statfs, diff, rollback, restore) does so for
//     all of them (lockAll, syncWriters), and so does Release;
//   - a "writer" marker in Badger says so, so that after a crash Open adopts
//     the staging file's size (what the kernel acknowledged is in it);
//   - no backing file is given where the journal must see each write: to a
//     file with setuid or setgid-with-group-exec (write clears them), or
//     when a byte quota is set (each write is checked);
//   - a reader of a clean file gets its content copied into a staging file
//     first (the local cache), which does not make it dirty.
//
// A file unlinked while open keeps its inode (link count 0, marked an
// orphan in Badger) and data until its last Release; Open deletes orphans a
// crash left.

// Handle is an open regular file.
type Handle struct {
	Ino     Ino
	write   bool
	epoch   uint32
	gen     uint64 // Generation at Open
	backing *os.File
}

// Generation is the journal's Generation when h was opened: the inode
// numbers of handles of different generations name different files.
func (h *Handle) Generation() uint64 { return h.gen }

// Backing returns the file the kernel may read and write directly for this
// handle (FUSE passthrough), or nil: reads and writes must go through Read
// and Write. It stays open until Release.
func (h *Handle) Backing() *os.File { return h.backing }

// writerState is an inode open for writing through a backing file.
type writerState struct {
	handles int
	size    int64 // staging file size and mtime last adopted
	mtime   int64 // mtimeUnknown: not known (the staging file is new)
}

// mtimeUnknown is the mtime of a writerState whose staging file CreateOpen
// made empty: it changes only with a write, which makes it longer, so its
// size alone says whether the kernel wrote to it.
const mtimeUnknown = -1

// Open opens regular file ino. With write, the caller may write through the
// handle. With backing, the caller wants a backing file for passthrough
// (given when the rules above allow).
func (j *Journal) Open(ctx context.Context, c Caller, ino Ino, write, backing bool) (*Handle, error) {
	lock := j.lock
	if write {
		lock = j.lockW
	}
	if err := lock(); err != nil {
		return nil, err
	}
	defer j.mu.Unlock()
	if write {
		// A writer may change the bytes a running snapshot has yet to
		// read (passthrough: without the journal hearing of it).
		if err := j.thaw(ino); err != nil {
			return nil, err
		}
	}
	if err := j.adopt(ino); err != nil {
		return nil, err
	}
	n, err := j.inode(ino)
	if err != nil {
		return nil, err
	}
	if err := checkRegular(n, "open"); err != nil {
		return nil, err
	}
	h := &Handle{Ino: ino, write: write, epoch: j.m.Epoch, gen: j.generation.Load()}
	// Opening a staged file for writing (to truncate it, say) works on a
	// full disk; a copy-up checks for its own bytes (stage).
	defer j.useReserve()()
	if backing && j.mayPassThrough(n, write) {
		if h.backing, err = j.openBacking(n, write); err != nil {
			return nil, err
		}
	}
	j.opens[ino]++
	return h, nil
}

// CreateOpen is Create, then Open of the new file (FUSE_CREATE), under one
// lock and in one transaction. With backing (where Open's rules give one),
// the new file's empty staging file is created first, with one open(2)
// (O_EXCL), and becomes the handle's backing file; the transaction that
// makes the file also makes it Staged and, with write, marks it a writer.
// A new file has no bytes: no copy-up, no trim, no stat. A kill -9 at any
// point leaves the file made and open as Open would (an acknowledged
// create is in the journal; what the kernel wrote to the backing file is
// adopted at the next Open, as for any writer), or no file and at most a
// staging file no record names, which the next create of its inode number
// cuts.
func (j *Journal) CreateOpen(ctx context.Context, c Caller, parent Ino, name string, mode uint32, write, backing bool) (Attr, *Handle, error) {
	if err := j.lockW(); err != nil {
		return Attr{}, nil, err
	}
	defer j.mu.Unlock()
	if err := j.checkMknode(ctx, parent, name); err != nil {
		return Attr{}, nil, err
	}
	mode &= ModePerm
	// Setgid may only be dropped from mode by the parent's rules below:
	// the rules of Open, applied to mode, are as strict or stricter.
	pass := backing && j.mayPassThrough(&inode{Attr: Attr{Mode: mode}}, write)
	ino := Ino(j.m.NextIno)
	var bf *os.File
	if pass {
		var err error
		if bf, err = j.createBacking(ino); err != nil {
			return Attr{}, nil, err
		}
	}
	a, err := j.mknodeLocked(c, parent, name, TypeRegular, mode, 0, "", func(txn *metalog.Txn, n *inode) error {
		if n.Ino != ino {
			return fmt.Errorf("%w: create %q: inode %d, expected %d", ErrIO, name, n.Ino, ino)
		}
		if !pass {
			return nil
		}
		n.Staged = true
		if write {
			return txn.Set(writerKey(j.m.Epoch, n.Ino), nil)
		}
		return nil
	})
	if err != nil {
		if bf != nil {
			bf.Close()
			j.cfg.FS.Remove(j.stagingPath(ino))
		}
		return Attr{}, nil, err
	}
	h := &Handle{Ino: ino, write: write, epoch: j.m.Epoch, gen: j.generation.Load(), backing: bf}
	if pass {
		j.trimmed[ino] = struct{}{}
		if write {
			j.writers[ino] = &writerState{handles: 1, mtime: mtimeUnknown}
		}
	}
	j.opens[ino]++
	return a, h, nil
}

// createBacking creates the empty staging file of the new inode ino and
// returns it to be a backing file.
func (j *Journal) createBacking(ino Ino) (*os.File, error) {
	f, err := j.createStaging(ino)
	if err != nil {
		return nil, j.dataErr("create staging file", ino, err)
	}
	if of, ok := f.(osFile); ok {
		return of.File, nil
	}
	// A File of another FS (tests): open the path for the kernel.
	f.Close()
	bf, err := openFile(j.stagingPath(ino), os.O_RDWR, 0)
	if err != nil {
		return nil, j.dataErr("open staging file for passthrough", ino, err)
	}
	return bf, nil
}

// Stale reports whether h was opened before a rollback: the file it named
// is gone from the live state, and operations on it fail with ErrStale.
func (j *Journal) Stale(h *Handle) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return h.epoch != j.m.Epoch
}

// mayPassThrough reports whether n may be handed to the kernel.
func (j *Journal) mayPassThrough(n *inode, write bool) bool {
	if !write {
		return true
	}
	if n.Mode&ModeSetuid != 0 || n.Mode&ModeSetgid != 0 && n.Mode&0o010 != 0 {
		return false
	}
	return j.cfg.MaxBytes == 0
}

// openBacking opens n's staging file for the kernel, staging n first for a
// writer. The staging file is cut to Size first: the kernel reads it to its
// end.
func (j *Journal) openBacking(n *inode, write bool) (*os.File, error) {
	var f File
	var err error
	_, busy := j.writers[n.Ino]
	switch {
	case write && !busy:
		// Staged, dirty and marked a writer in one transaction.
		f, err = j.prepareDataWith(n, func(txn *metalog.Txn) error { return txn.Set(writerKey(j.m.Epoch, n.Ino), nil) })
	case write:
		f, err = j.prepareData(n)
	case !n.Staged:
		f, err = j.stageClean(n)
	}
	if err != nil {
		return nil, err
	}
	// Always read-write: the kernel keeps one backing file per inode for
	// every handle, readers' and writers'. A reader of a staged file needs
	// this open only (not the journal's own, j.files).
	path := j.stagingPath(n.Ino)
	bf, err := openFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) && f == nil {
		// An empty file whose staging file a crash kept from being made:
		// openStaged makes it.
		if _, err := j.openStaged(n); err != nil {
			return nil, err
		}
		bf, err = openFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, j.dataErr("open staging file for passthrough", n.Ino, err)
	}
	if !busy {
		var t File = osFile{bf}
		if f != nil {
			t = f
		}
		if err := j.trim(t, n); err != nil {
			bf.Close()
			return nil, err
		}
	}
	if write {
		ws := j.writers[n.Ino]
		if ws == nil {
			fi, err := bf.Stat()
			if err != nil {
				bf.Close()
				return nil, j.dataErr("stat staging file", n.Ino, err)
			}
			ws = &writerState{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
			j.writers[n.Ino] = ws
		}
		ws.handles++
	}
	return bf, nil
}

// stageClean copies a clean file's content into a staging file for a
// reader (the local cache of its chunks, which the kernel reads directly)
// without making it dirty: the staging file holds exactly the committed
// content, as after a snapshot.
func (j *Journal) stageClean(n *inode) (File, error) {
	f, err := j.stage(n, false)
	if err != nil {
		return nil, err
	}
	if err := j.update(func(txn *metalog.Txn) error { return j.putInode(txn, n) }); err != nil {
		return nil, err
	}
	j.trimmed[n.Ino] = struct{}{}
	return f, nil
}

// Release closes a handle. The last release of an unlinked file deletes it.
func (j *Journal) Release(ctx context.Context, h *Handle) (err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	defer j.useReserve()() // records what a passthrough writer wrote: never lost to a full disk
	if h.backing != nil {
		// Closed last: the staging file's size is read through it.
		defer func() { err = errors.Join(err, h.backing.Close()) }()
	}
	var errs []error
	if j.closed || h.epoch != j.m.Epoch {
		return nil // a rollback dropped the handle's inode
	}
	if ws := j.writers[h.Ino]; ws != nil && h.write && h.backing != nil {
		if ws.handles--; ws.handles == 0 {
			// The last writer: adopt the staging file's size and drop the
			// marker in one transaction.
			delete(j.writers, h.Ino)
			errs = append(errs, j.syncWriterWith(h.Ino, ws, h.backing, func(txn *metalog.Txn) error { return txn.Delete(writerKey(j.m.Epoch, h.Ino)) }))
		} else {
			errs = append(errs, j.syncWriterWith(h.Ino, ws, h.backing, nil))
		}
	}
	if j.opens[h.Ino]--; j.opens[h.Ino] <= 0 {
		delete(j.opens, h.Ino)
		errs = append(errs, j.dropOrphan(h.Ino))
	}
	return errors.Join(errs...)
}

// syncWriters brings the records of files open for passthrough writing up
// to date with their staging files (lockAll).
func (j *Journal) syncWriters() error {
	for ino, ws := range j.writers {
		if err := j.syncWriter(ino, ws); err != nil {
			return err
		}
	}
	return nil
}

// adopt brings ino's record up to date with its staging file if ino is open
// for passthrough writing: an operation that touches ino sees what the
// kernel wrote. A map lookup otherwise.
func (j *Journal) adopt(ino Ino) error {
	if ws := j.writers[ino]; ws != nil {
		return j.syncWriter(ino, ws)
	}
	return nil
}

// adoptAttr is adopt, then ino's attributes.
func (j *Journal) adoptAttr(ino Ino) (Attr, error) {
	if err := j.adopt(ino); err != nil {
		return Attr{}, err
	}
	return j.getAttrLocked(ino)
}

// syncWriter adopts the staging file's size and mtime into ino's record if
// the kernel changed them.
func (j *Journal) syncWriter(ino Ino, ws *writerState) error {
	return j.syncWriterWith(ino, ws, nil, nil)
}

// syncWriterWith is syncWriter with more to write in the same transaction
// (written even if nothing changed). f, if not nil, is the staging file,
// open: it is asked (fstat) instead of its path.
func (j *Journal) syncWriterWith(ino Ino, ws *writerState, f *os.File, extra func(txn *metalog.Txn) error) error {
	c, err := j.statWriter(ino, ws, f)
	if err != nil {
		return err
	}
	if c == nil {
		if extra != nil {
			return j.update(extra)
		}
		return nil
	}
	n, err := j.inode(ino)
	if err != nil {
		return err
	}
	c.apply(j, n)
	if err := j.saveDirty(n, extra); err != nil {
		return err
	}
	c.committed(j)
	return nil
}

// writerChange is what the kernel changed in the staging file of a file
// open for passthrough writing since its record last adopted it.
type writerChange struct {
	ino         Ino
	ws          *writerState
	size, mtime int64
}

// pendingWrite returns what the kernel changed in ino's staging file if
// ino is open for passthrough writing (nil: nothing), for an operation to
// record in its own transaction (apply, then committed).
func (j *Journal) pendingWrite(ino Ino) (*writerChange, error) {
	if ws := j.writers[ino]; ws != nil {
		return j.statWriter(ino, ws, nil)
	}
	return nil, nil
}

// statWriter compares ino's staging file (f, or its path) with ws.
func (j *Journal) statWriter(ino Ino, ws *writerState, f *os.File) (*writerChange, error) {
	var fi os.FileInfo
	var err error
	if f == nil {
		// The journal's own descriptor of the staging file, if it has
		// one: fstat(2) costs no path walk.
		if of, ok := j.files[ino].(osFile); ok {
			f = of.File
		}
	}
	if f != nil {
		fi, err = f.Stat()
	} else {
		fi, err = os.Stat(j.stagingPath(ino))
	}
	if err != nil {
		return nil, j.dataErr("stat staging file", ino, err)
	}
	size, mtime := fi.Size(), fi.ModTime().UnixNano()
	if size == ws.size && (mtime == ws.mtime || ws.mtime == mtimeUnknown) {
		return nil, nil
	}
	return &writerChange{ino: ino, ws: ws, size: size, mtime: mtime}, nil
}

// apply records c in n, ino's record, and the byte count, for the
// caller's transaction (which restores the count if it fails).
func (c *writerChange) apply(j *Journal, n *inode) {
	j.m.Bytes = j.m.Bytes - min(j.m.Bytes, n.Size) + uint64(c.size)
	n.Size = uint64(c.size)
	if c.mtime != c.ws.mtime {
		n.Mtime, n.Ctime = c.mtime, max(c.mtime, n.Ctime)
	}
}

// committed notes that the transaction recording c committed.
func (c *writerChange) committed(j *Journal) {
	c.ws.size, c.ws.mtime = c.size, c.mtime
	j.trimmed[c.ino] = struct{}{}
}

// adoptStaging records size (and, with touched, that mtime and ctime) for
// n, whose staging file the kernel wrote (recoverHandles).
func (j *Journal) adoptStaging(n *inode, size int64, touched int64, extra func(txn *metalog.Txn) error) error {
	j.m.Bytes = j.m.Bytes - min(j.m.Bytes, n.Size) + uint64(size)
	n.Size = uint64(size)
	if touched != 0 {
		n.Mtime, n.Ctime = touched, max(touched, n.Ctime)
	}
	j.trimmed[n.Ino] = struct{}{}
	return j.saveDirty(n, extra)
}

// orphan keeps regular file n, whose last name is going, while it is open:
// link count 0, an orphan marker, data kept. It reports false if n is not
// open.
func (j *Journal) orphan(txn *metalog.Txn, n *inode) (bool, error) {
	if n.Type != TypeRegular || j.opens[n.Ino] == 0 {
		return false, nil
	}
	n.Nlink = 0
	if err := j.putInode(txn, n); err != nil {
		return true, err
	}
	return true, txn.Set(orphanKey(j.m.Epoch, n.Ino), nil)
}

// dropOrphan deletes ino if it is an orphan.
func (j *Journal) dropOrphan(ino Ino) error {
	n, err := j.inode(ino)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil || n.Nlink > 0 {
		return err
	}
	var dropped []*inode
	err = j.update(func(txn *metalog.Txn) error {
		if err := txn.Delete(orphanKey(j.m.Epoch, ino)); err != nil {
			return err
		}
		return j.reallyDeleteInode(txn, n, &dropped)
	})
	if err != nil {
		return fmt.Errorf("delete unlinked inode %d: %w", ino, err)
	}
	j.forget(dropped)
	return nil
}

// recoverHandles finishes what open files left when the journal stopped:
// orphans are deleted, and files open for passthrough writing take their
// staging file's size. Called by Open, before cleanup.
func (j *Journal) recoverHandles() error {
	var orphans, writers []Ino
	err := j.db.View(func(txn *metalog.Txn) error {
		for _, kind := range []byte{'O', 'W'} {
			prefix := inoKey(j.m.Epoch, kind, 0)[:6]
			it := txn.NewIterator(metalog.IteratorOptions{Prefix: prefix, PrefetchValues: false})
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().Key()
				if len(k) != 14 {
					continue
				}
				ino := Ino(uint64(k[6])<<56 | uint64(k[7])<<48 | uint64(k[8])<<40 | uint64(k[9])<<32 | uint64(k[10])<<24 | uint64(k[11])<<16 | uint64(k[12])<<8 | uint64(k[13]))
				if kind == 'O' {
					orphans = append(orphans, ino)
				} else {
					writers = append(writers, ino)
				}
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: scan open files: %v", ErrIO, err)
	}
	for _, ino := range writers {
		n, err := j.inode(ino)
		if err == nil && n.Staged {
			fi, serr := os.Stat(j.stagingPath(ino))
			if serr == nil && uint64(fi.Size()) != n.Size {
				err = j.adoptStaging(n, fi.Size(), fi.ModTime().UnixNano(), nil)
			}
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if err := j.update(func(txn *metalog.Txn) error { return txn.Delete(writerKey(j.m.Epoch, ino)) }); err != nil {
			return err
		}
	}
	for _, ino := range orphans {
		if err := j.dropOrphan(ino); err != nil {
			return err
		}
		// A marker whose inode is gone (or was relinked) is stale.
		if err := j.update(func(txn *metalog.Txn) error { return txn.Delete(orphanKey(j.m.Epoch, ino)) }); err != nil {
			return err
		}
	}
	return nil
}
