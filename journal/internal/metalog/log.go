package metalog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Segment files: "<first sequence number, 16 hex digits>.log", each the
// magic followed by records:
//
//	length(4) crc32c(4) | seq(8) count(uvarint) write*
//	write: kind(1) keylen(uvarint) key [vallen(uvarint) val]  (kind 1 set, 2 delete)
//
// length and the CRC cover what follows the header. Integers are little
// endian.
var segMagic = []byte("CAIRNML1")

const (
	recHeader = 8
	kindSet   = 1
	kindDel   = 2
	// maxRecord bounds a record's length on replay, far above what the
	// transaction limits allow, so a torn length cannot ask for gigabytes.
	maxRecord = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// write is one set or delete of a transaction.
type write struct {
	key, val []byte
	del      bool
}

// encodeRecord appends the record of seq's writes to buf.
func encodeRecord(buf []byte, seq uint64, ws []write) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, recHeader)...)
	buf = binary.LittleEndian.AppendUint64(buf, seq)
	buf = binary.AppendUvarint(buf, uint64(len(ws)))
	for _, w := range ws {
		if w.del {
			buf = append(buf, kindDel)
			buf = binary.AppendUvarint(buf, uint64(len(w.key)))
			buf = append(buf, w.key...)
			continue
		}
		buf = append(buf, kindSet)
		buf = binary.AppendUvarint(buf, uint64(len(w.key)))
		buf = append(buf, w.key...)
		buf = binary.AppendUvarint(buf, uint64(len(w.val)))
		buf = append(buf, w.val...)
	}
	body := buf[start+recHeader:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(body, castagnoli))
	return buf
}

var errTorn = errors.New("torn record")

// decodeRecord reads the record at the start of b: its sequence number, its
// writes (sharing b's memory) and its length. errTorn if b does not start
// with a whole, intact record.
func decodeRecord(b []byte) (seq uint64, ws []write, n int, err error) {
	if len(b) < recHeader {
		return 0, nil, 0, errTorn
	}
	size := binary.LittleEndian.Uint32(b)
	if size > maxRecord || int(size) > len(b)-recHeader || size < 9 {
		return 0, nil, 0, errTorn
	}
	body := b[recHeader : recHeader+int(size)]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return 0, nil, 0, errTorn
	}
	seq = binary.LittleEndian.Uint64(body)
	p := body[8:]
	count, k := binary.Uvarint(p)
	if k <= 0 || count > uint64(len(p)) {
		return 0, nil, 0, errTorn
	}
	p = p[k:]
	ws = make([]write, 0, count)
	for range count {
		if len(p) < 1 {
			return 0, nil, 0, errTorn
		}
		kind := p[0]
		p = p[1:]
		var key, val []byte
		if key, p, err = takeBytes(p); err != nil {
			return 0, nil, 0, err
		}
		switch kind {
		case kindSet:
			if val, p, err = takeBytes(p); err != nil {
				return 0, nil, 0, err
			}
			ws = append(ws, write{key: key, val: val})
		case kindDel:
			ws = append(ws, write{key: key, del: true})
		default:
			return 0, nil, 0, errTorn
		}
	}
	if len(p) != 0 {
		return 0, nil, 0, errTorn
	}
	return seq, ws, recHeader + int(size), nil
}

func takeBytes(p []byte) ([]byte, []byte, error) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return nil, nil, errTorn
	}
	return p[k : k+int(n) : k+int(n)], p[k+int(n):], nil
}

// segment is one log file, written at its end with pwrite(2) on a raw
// descriptor (no poller registration, no os.File bookkeeping).
type segment struct {
	path   string
	fd     int
	first  uint64      // sequence number of its first record
	size   int64       // under DB.wmu
	dirty  atomic.Bool // written since its last fdatasync
	synced bool        // fdatasynced at least once (under DB.segMu)
}

func segName(first uint64) string { return fmt.Sprintf("%016x.log", first) }

// createSegment creates the segment whose first record will be first.
func createSegment(dir string, first uint64) (*segment, error) {
	path := filepath.Join(dir, segName(first))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create metadata log %s: %w", path, err)
	}
	s := &segment{path: path, fd: fd, first: first}
	if err := s.append(segMagic); err != nil {
		s.close()
		os.Remove(path)
		return nil, err
	}
	return s, nil
}

// append writes b at the segment's end. A failed or short write is undone
// (the file cut back to its old end), so the log never holds a partial
// record before a later whole one; if that fails too, ErrBroken.
func (s *segment) append(b []byte) error {
	n, err := unix.Pwrite(s.fd, b, s.size)
	if err == nil && n == len(b) {
		s.size += int64(n)
		s.dirty.Store(true)
		return nil
	}
	if err == nil {
		err = unix.ENOSPC // a short write to a regular file: the disk is full
	}
	if terr := unix.Ftruncate(s.fd, s.size); terr != nil {
		return fmt.Errorf("%w: append to %s: %w; cutting it back: %w", ErrBroken, s.path, err, terr)
	}
	return fmt.Errorf("append to metadata log %s: %w", s.path, err)
}

func (s *segment) sync() error {
	if !s.dirty.Swap(false) {
		return nil
	}
	if err := unix.Fdatasync(s.fd); err != nil {
		s.dirty.Store(true)
		return fmt.Errorf("fdatasync metadata log %s: %w", s.path, err)
	}
	s.synced = true
	return nil
}

func (s *segment) close() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// remove closes and deletes the segment.
func (s *segment) remove() error {
	s.close()
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove metadata log %s: %w", s.path, err)
	}
	return nil
}

// listSegments returns the segment files of dir by first sequence number.
func listSegments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read metadata log directory: %w", err)
	}
	var firsts []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || len(name) != 16 {
			continue
		}
		first, err := strconv.ParseUint(name, 16, 64)
		if err != nil {
			continue
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	return firsts, nil
}

// truncateSync cuts a segment at size and makes that durable, so that a
// segment written after it is never read behind a tail cut at reopen.
func truncateSync(fd int, size int64) error {
	if err := unix.Ftruncate(fd, size); err != nil {
		return err
	}
	return unix.Fsync(fd)
}

// replay reads dir's segments and returns the records after checkpoint as
// memtables (oldest first, each holding its segment open) and the last
// sequence number. It cuts a torn tail off and deletes segments past a gap
// or wholly before the checkpoint.
func replay(dir string, checkpoint uint64) (mems []*memtable, last uint64, err error) {
	firsts, err := listSegments(dir)
	if err != nil {
		return nil, 0, err
	}
	last = checkpoint
	stopped := false
	defer func() {
		if err != nil {
			for _, m := range mems {
				m.seg.close()
			}
			mems = nil
		}
	}()
	for _, first := range firsts {
		path := filepath.Join(dir, segName(first))
		if stopped {
			// Past a torn record or a gap: records never acknowledged, or
			// lost to power loss with the ones before them.
			if err := os.Remove(path); err != nil {
				return nil, 0, fmt.Errorf("remove metadata log %s: %w", path, err)
			}
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, 0, fmt.Errorf("read metadata log: %w", err)
		}
		if len(data) < len(segMagic) || string(data[:len(segMagic)]) != string(segMagic) {
			if len(data) > len(segMagic) {
				return nil, 0, fmt.Errorf("%w: %s is not a metadata log (remove it to drop the changes after the last checkpoint)", ErrCorrupt, path)
			}
			// Created, then killed before its magic: nothing in it.
			if err := os.Remove(path); err != nil {
				return nil, 0, fmt.Errorf("remove metadata log %s: %w", path, err)
			}
			continue
		}
		var mem *memtable
		off := len(segMagic)
		for off < len(data) {
			seq, ws, n, derr := decodeRecord(data[off:])
			if derr != nil {
				break // torn: the record in flight at a crash; cut off below
			}
			if seq > last+1 || (seq <= last && seq > checkpoint) {
				// A gap: a record before this one was lost (power loss
				// before a Sync), so this one and all after it go too.
				stopped = true
				break
			}
			if seq == last+1 {
				if mem == nil {
					mem = newMemtable(nil)
				}
				mem.apply(seq, ws)
				last = seq
			}
			off += n
		}
		if mem == nil {
			if err := os.Remove(path); err != nil {
				return nil, 0, fmt.Errorf("remove metadata log %s: %w", path, err)
			}
			continue
		}
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, 0, fmt.Errorf("open metadata log: %w", err)
		}
		if off < len(data) {
			if err := truncateSync(fd, int64(off)); err != nil {
				unix.Close(fd)
				return nil, 0, fmt.Errorf("cut the torn end off metadata log %s: %w", path, err)
			}
		}
		// Taken as synced: an fsync before the crash may have promised
		// its records, so its checkpoint syncs Badger before it goes.
		mem.seg = &segment{path: path, fd: fd, first: first, size: int64(off), synced: true}
		mems = append(mems, mem)
	}
	return mems, last, nil
}
