package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/cairnfs/cairn/journal/internal/metalog"
)

const metaVersion = 1

// Flags of the state's optional trailer.
const (
	trailerDiverged = 1 << iota // Diverged and DivergedHead follow
	trailerRollback             // a rollback's ref move is pending; RollbackFrom follows
)

var metaStateKey = metaKey("state")

func (m *meta) encode() []byte {
	b := []byte{metaVersion}
	b = binary.AppendUvarint(b, uint64(len(m.Workspace)))
	b = append(b, m.Workspace...)
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = append(b, m.Base[:]...)
	b = append(b, m.Pending[:]...)
	for _, v := range []uint64{m.Seq, m.Gen, m.Committed, m.NextIno, m.Bytes, m.Files, m.Dirs, m.Symlinks, m.Others} {
		b = binary.AppendUvarint(b, v)
	}
	// An optional trailer (absent in journals written before it, and when
	// it would be empty): a flags byte, then what the flags say is there.
	var flags byte
	if !m.Diverged.IsZero() {
		flags |= trailerDiverged
	}
	if m.RollbackPending {
		flags |= trailerRollback
	}
	if flags != 0 {
		b = append(b, flags)
		if flags&trailerDiverged != 0 {
			b = append(b, m.Diverged[:]...)
			b = append(b, m.DivergedHead[:]...)
		}
		if flags&trailerRollback != 0 {
			b = append(b, m.RollbackFrom[:]...)
		}
	}
	return b
}

func decodeMeta(data []byte) (meta, error) {
	d := &dec{b: data}
	var m meta
	if v := d.u8(); v != metaVersion && d.err == nil {
		return m, fmt.Errorf("%w: journal state has version %d (this cairn reads %d): written by a newer cairn", ErrIO, v, metaVersion)
	}
	m.Workspace = string(d.bytes(d.uv()))
	m.Epoch = d.u32()
	m.Base = d.id()
	m.Pending = d.id()
	for _, p := range []*uint64{&m.Seq, &m.Gen, &m.Committed, &m.NextIno, &m.Bytes, &m.Files, &m.Dirs, &m.Symlinks, &m.Others} {
		*p = d.uv()
	}
	if d.err == nil && len(d.b) != 0 {
		flags := d.u8()
		if flags&^(trailerDiverged|trailerRollback) != 0 && d.err == nil {
			d.fail("unknown flags in state")
		}
		if flags&trailerDiverged != 0 {
			m.Diverged, m.DivergedHead = d.id(), d.id()
		}
		if flags&trailerRollback != 0 {
			m.RollbackPending, m.RollbackFrom = true, d.id()
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes in state")
	}
	return m, d.err
}

// loadMeta reads the journal state; ok is false for a new journal.
func (j *Journal) loadMeta() (ok bool, err error) {
	err = j.db.View(func(txn *metalog.Txn) error {
		item, err := txn.Get(metaStateKey)
		if errors.Is(err, metalog.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			j.m, err = decodeMeta(v)
			ok = err == nil
			return err
		})
	})
	if err != nil {
		return false, fmt.Errorf("read journal state in %s: %w", j.cfg.Dir, err)
	}
	return ok, nil
}

func (j *Journal) saveMeta(txn *metalog.Txn) error {
	return txn.Set(metaStateKey, j.m.encode())
}

// update runs fn in a read-write transaction and saves the meta state with
// it. If the transaction fails, the in-memory meta state is restored, so
// memory never runs ahead of disk.
func (j *Journal) update(fn func(txn *metalog.Txn) error) error {
	saved := j.m
	err := j.write(func(txn *metalog.Txn) error {
		if err := fn(txn); err != nil {
			return err
		}
		return j.saveMeta(txn)
	})
	if err != nil {
		j.m = saved
		if isJournalErr(err) {
			return err
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			// The metadata log's append found the disk full (another
			// program filled it past the guard): refused, nothing written.
			return fmt.Errorf("%w: journal metadata: %w", ErrNoSpace, err)
		}
		return fmt.Errorf("%w: journal metadata: %v", ErrIO, err)
	}
	return nil
}

// isJournalErr reports whether err already wraps one of the sentinels.
func isJournalErr(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

var sentinels = []error{ErrNotFound, ErrExists, ErrNotDir, ErrIsDir, ErrNotEmpty, ErrInvalid, ErrNameTooLong,
	ErrPermission, ErrNoData, ErrRange, ErrTooBig, ErrFileTooBig, ErrNoSpace, ErrTooManyLinks, ErrNotSupported,
	ErrStale, ErrBusy, ErrIO, ErrNoXattrSpace, ErrClosed, ErrBadFD, ErrNoSeekData, ErrReadOnly}

// markDirty records that ino changed since the base snapshot, and that every
// directory holding it (up to the root) needs a new tree. An inode already
// marked in this generation has its directories marked too (every marking
// marks them in the same transaction), so that case is one read. Operations
// that add a name for an inode mark the new parent themselves.
func (j *Journal) markDirty(txn *metalog.Txn, n *inode) error {
	if g, ok, err := j.dirtyGen(txn, n.Ino); err != nil {
		return err
	} else if ok && g == j.m.Gen {
		return nil
	}
	if err := j.setDirty(txn, n.Ino); err != nil {
		return err
	}
	if n.Type == TypeDir {
		return j.markDirUp(txn, n.Parent)
	}
	it := txn.NewIterator(metalog.IteratorOptions{Prefix: linkPrefix(j.m.Epoch, n.Ino)})
	defer it.Close()
	var parents []Ino
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key() // "e" epoch(4) "p" ino(8) parent(8) name
		parents = append(parents, Ino(binary.BigEndian.Uint64(k[14:22])))
	}
	it.Close()
	for _, p := range parents {
		if err := j.markDirUp(txn, p); err != nil {
			return err
		}
	}
	return nil
}

// markDirUp marks dir and its ancestors dirty, stopping at the first one
// already marked in this generation (its ancestors are marked too).
func (j *Journal) markDirUp(txn *metalog.Txn, dir Ino) error {
	for {
		if _, ok := j.cache.marked[dir]; ok {
			return nil
		}
		if g, ok, err := j.dirtyGen(txn, dir); err != nil {
			return err
		} else if ok && g == j.m.Gen {
			j.cache.pendingMarked = append(j.cache.pendingMarked, dir)
			return nil
		}
		if err := j.setDirty(txn, dir); err != nil {
			return err
		}
		j.cache.pendingMarked = append(j.cache.pendingMarked, dir)
		if dir == RootIno {
			return nil
		}
		d, err := j.getInode(txn, dir)
		if err != nil {
			return err
		}
		dir = d.Parent
	}
}

// markNew marks a new inode, whose only name is in parent, dirty.
func (j *Journal) markNew(txn *metalog.Txn, ino, parent Ino) error {
	if err := j.setDirty(txn, ino); err != nil {
		return err
	}
	return j.markDirUp(txn, parent)
}

func (j *Journal) setDirty(txn *metalog.Txn, ino Ino) error {
	j.cache.pendingDirty = append(j.cache.pendingDirty, ino)
	return txn.Set(dirtyKey(j.m.Epoch, ino), u64(j.m.Gen))
}

// dirtyGen returns the generation of ino's dirty marker, if it has one.
func (j *Journal) dirtyGen(txn *metalog.Txn, ino Ino) (uint64, bool, error) {
	item, err := txn.Get(dirtyKey(j.m.Epoch, ino))
	if errors.Is(err, metalog.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var g uint64
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: dirty marker of inode %d", ErrIO, ino)
		}
		g = binary.BigEndian.Uint64(v)
		return nil
	})
	return g, true, err
}

// isDirty reports whether ino changed since the base snapshot.
func (j *Journal) isDirty(ino Ino) bool {
	_, ok := j.cache.dirty[ino]
	return ok
}
