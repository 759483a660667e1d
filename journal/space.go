package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A full disk must be an error (ErrNoSpace), never a crash. Badger writes
// its memtable logs (.mem) and tables (.sst) through mmap'd files that it
// sizes with ftruncate, so they are sparse: when the disk has no block left
// for a page Badger writes, the kernel raises SIGBUS and the process dies
// (tmpfs and ext4 alike). The space guard keeps that from happening:
//
//   - Every memtable log is fallocated as soon as the guard sees it, so
//     metadata writes into it never need a new block.
//   - Ordinary writes (creating, growing, staging, a copy-up, starting a
//     snapshot, whose packs usually go to the same disk) are refused with
//     ErrNoSpace while the disk has less free than need: what Badger may
//     still write without asking (the next memtable log, the table a full
//     memtable is flushed to, a compaction of the tables there are), what
//     recording a snapshot takes, and a margin for the writes between two
//     checks; and room for the reserve file if it is not whole.
//   - The journal keeps a reserve file of its own on the disk. A disk filled
//     by someone else (writes through FUSE passthrough go straight to the
//     staging files, other programs share the disk) still holds it: the
//     operations that must keep working on a full disk (reads that load a
//     directory, unlink, rmdir, truncate, open, release, fsync, recording
//     a snapshot that reached the store, rollback, opening and closing the
//     journal) release it when the disk has less than floor (a memtable
//     flush and log), and it comes back once the disk has room again.
//
// With the default Badger options (16 MiB memtables): each memtable log
// holds 18.5 MiB, the reserve file 59.5 MiB, and ordinary writes leave
// 44.5 MiB plus the tables' size free. Free space is checked with
// statfs(2) at most every checkEvery or every checkBytes of estimated
// writes, and on every write while the disk is near the line: about 90 ns
// per operation otherwise (BenchmarkSpaceCheck).
type space struct {
	mu sync.Mutex // the background epoch cleanup checks too

	dir     string // the journal's directory; statfs's target, holds the reserve file
	metaDir string // Badger's directory

	walSize     int64  // bytes of a memtable log Badger writes into: fallocated
	flushNeed   uint64 // free bytes a memtable flush may take (one L0 table)
	reserveSize int64  // the reserve file's size when whole
	floor       uint64 // free bytes operations that may use the reserve leave
	need        uint64 // free bytes ordinary writes leave (Need, without the tables' size)

	free     uint64               // free bytes at the last check
	tables   uint64               // bytes in Badger's tables at the last check
	spent    uint64               // bytes estimated written since the last check
	checked  time.Time            // time of the last check
	reserved int64                // the reserve file's size now
	wals     map[string]struct{}  // memtable logs fallocated already
	logf     func(string, ...any) // Config.Logf
	disabled bool                 // no statfs on this platform
}

const (
	checkEvery     = 20 * time.Millisecond
	checkBytes     = 1 << 20
	txnEstimate    = 1 << 10 // bytes one metadata transaction is counted as
	snapshotNeed   = 4 << 20 // bytes recording a snapshot in the journal may write
	reserveName    = "reserve"
	reserveMinFree = 1 << 20  // never leave less than this on the disk
	copyUpCheck    = 64 << 20 // most bytes a copy-up is checked for beforehand
	compactionMax  = 256 << 20
)

// newSpace sizes the guard for Badger's options.
func newSpace(dir, metaDir string, opts badger.Options, logf func(string, ...any)) *space {
	// A memtable log is sized 2 x MemTableSize, but Badger starts a new one
	// once MemTableSize is written, overshooting by at most one batch
	// (15% of MemTableSize, Badger's maxBatchSize).
	wal := opts.MemTableSize + opts.MemTableSize*15/100 + 1<<16
	flush := uint64(opts.MemTableSize) + uint64(opts.MemTableSize)/4
	s := &space{dir: dir, metaDir: metaDir, walSize: wal, flushNeed: flush, logf: logf, wals: make(map[string]struct{})}
	s.floor = flush + uint64(wal) + reserveMinFree
	// Released, the reserve covers the flush of a closing journal and
	// leaves the floor for opening it again.
	s.reserveSize = int64(s.floor + flush)
	s.need = s.floor + snapshotNeed + checkBytes
	return s
}

// check is called before a write of about n bytes to the journal's disk.
// reserved: the operation may use the reserve (see space).
func (s *space) check(n uint64, reserved bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disabled {
		return nil
	}
	s.spent += n
	// Ordinary writes leave room for the reserve to come back, too.
	line := s.need + s.tables + uint64(s.reserveSize-s.reserved)
	if reserved {
		line = s.floor
	}
	if s.spent < checkBytes && s.free >= line+s.spent && time.Since(s.checked) < checkEvery {
		return nil
	}
	if err := s.refreshLocked(); err != nil {
		return err
	}
	if reserved && s.free < s.floor+n && s.reserved > 0 {
		s.release()
	}
	if s.free >= line+n {
		return nil
	}
	return s.full(line + n)
}

// full is the error for a disk with less than need free.
func (s *space) full(need uint64) error {
	return fmt.Errorf("no space left in %s (%s free; the journal needs %s): free space and retry: %w",
		s.dir, mib(s.free), mib(need), ErrNoSpace)
}

// refresh reads the disk's free space, fallocates memtable logs Badger
// started since, and regrows the reserve file when there is room.
func (s *space) refresh() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refreshLocked()
}

func (s *space) refreshLocked() error {
	s.spent = 0
	s.checked = time.Now()
	free, err := diskFree(s.dir)
	if errors.Is(err, ErrNotSupported) {
		s.disabled = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: free space of %s: %v", ErrIO, s.dir, err)
	}
	s.free = free
	entries, err := os.ReadDir(s.metaDir)
	if err != nil {
		return fmt.Errorf("%w: read %s: %v", ErrIO, s.metaDir, err)
	}
	var tables uint64
	live := make(map[string]struct{}, 2)
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".sst"):
			if info, err := e.Info(); err == nil {
				tables += uint64(info.Size())
			}
		case strings.HasSuffix(name, ".mem"):
			live[name] = struct{}{}
			if _, ok := s.wals[name]; ok {
				continue
			}
			// Allocated blocks of the log only: Badger's own size stays.
			if err := allocate(filepath.Join(s.metaDir, name), s.walSize, true); err == nil {
				s.wals[name] = struct{}{}
			}
		}
	}
	for name := range s.wals {
		if _, ok := live[name]; !ok {
			delete(s.wals, name)
		}
	}
	// A compaction rewrites some tables before it deletes them: at most
	// the whole set, and at most what L0 to L1 takes with many L0 tables.
	s.tables = min(tables, compactionMax)
	if free, err = diskFree(s.dir); err == nil {
		s.free = free
	}
	if s.reserved < s.reserveSize && s.free >= s.floor+uint64(s.reserveSize-s.reserved) {
		if err := allocate(filepath.Join(s.dir, reserveName), s.reserveSize, false); err == nil {
			s.reserved = s.reserveSize
			if free, err = diskFree(s.dir); err == nil {
				s.free = free
			}
		}
	}
	return nil
}

// release gives the reserve file's blocks back to the disk, for Badger.
func (s *space) release() {
	if err := os.Truncate(filepath.Join(s.dir, reserveName), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.logf("journal %s: releasing its reserve: %v", s.dir, err)
		return
	}
	s.logf("journal %s: the disk is full (%s free); released the journal's reserve of %s; ordinary writes fail with ENOSPC until there is %s free",
		s.dir, mib(s.free), mib(uint64(s.reserved)), mib(s.need+s.tables+uint64(s.reserveSize)))
	s.reserved = 0
	if free, err := diskFree(s.dir); err == nil {
		s.free = free
	}
}

// open checks the disk before Badger opens: its start writes into fresh
// mmap'd files (and may flush memtable logs a crash left).
func (s *space) open() error {
	if info, err := os.Stat(filepath.Join(s.dir, reserveName)); err == nil {
		s.reserved = info.Size()
	}
	free, err := diskFree(s.dir)
	if errors.Is(err, ErrNotSupported) {
		s.disabled = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: free space of %s: %v", ErrIO, s.dir, err)
	}
	s.free = free
	if s.free < s.floor && s.reserved > 0 {
		s.release()
	}
	if s.free < s.floor {
		return s.full(s.floor)
	}
	return nil
}

// watchEvery is how often the watcher looks at the disk.
const watchEvery = 10 * time.Millisecond

// settleLooks is how many looks in a row must see the same free space for
// the filling to count as stopped (250 ms): a writer on a busy machine can
// pause for tens of milliseconds (two looks apart were not enough: a
// stalled dd then took the released reserve, and the journal was left
// with none). Nearly full is no sign either: a writer cut short by the
// last free block writes the rest of its buffer into whatever is freed.
const settleLooks = 25

// watch releases the reserve as soon as the disk has less free than
// Badger's own background work (a memtable flush, a compaction) may
// write, until stop is closed: a disk filled behind the journal's back (by
// passthrough writes or another program) then leaves that work room
// between the fill and the next journal operation. It narrows the window
// in which a flush or compaction that runs just as the disk fills can
// fault (SIGBUS in Badger's mmap'd table); closing it needs Badger to
// allocate its files before it writes them through mmap.
func (s *space) watch(stop <-chan struct{}) {
	if s.disabled {
		return
	}
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	last, same := uint64(1<<64-1), 0
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		free, err := diskFree(s.dir)
		if err != nil {
			continue
		}
		// Only once the filling stopped (its free space stays the same
		// for settleLooks looks): a writer that is still filling the disk
		// would take the reserve's blocks too, and the journal would be
		// left with neither.
		if free == last {
			same++
		} else {
			same = 0
		}
		last = free
		settled := same >= settleLooks
		s.mu.Lock()
		if s.reserved > 0 && settled && free < s.floor+s.tables {
			s.free = free
			s.release()
		}
		s.mu.Unlock()
	}
}

// close makes room for Badger's last flush.
func (s *space) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disabled {
		return
	}
	if free, err := diskFree(s.dir); err == nil {
		s.free = free
		if free < s.flushNeed+reserveMinFree && s.reserved > 0 {
			s.release()
		}
	}
}

// mib formats n bytes for people.
func mib(n uint64) string {
	switch {
	case n >= 10<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// useReserve lets the running operation use the disk's reserve (see
// space): `defer j.useReserve()()` under j.mu.
func (j *Journal) useReserve() func() {
	j.reserved++
	return func() { j.reserved-- }
}
