package outbox

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zeebo/blake3"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// Options configure Open.
type Options struct {
	// Uploads is how many objects are uploaded at once. Default: 4.
	Uploads int
	// MinBackoff and MaxBackoff bound the wait between retries of a failed
	// upload (doubling). Defaults: 100 ms and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// Logf receives messages for operators: failed uploads (once per
	// outage), recovery, lost compare-and-swaps. Default: none.
	Logf func(format string, args ...any)
	// OnLost is called, in a goroutine of its own, for each ref move
	// found lost (see Lost), so that the owner can record it where every
	// machine sees it. Optional.
	OnLost func(Lost)
	// Keep is how many bytes of uploaded objects that were written to
	// local disk (queued during an outage, or still queued at a Sync) stay
	// there to be read from (oldest dropped first), instead of being
	// deleted after the upload. Objects uploaded from memory are not kept
	// (the store caches the trees it writes itself). The kept copies are a
	// cache, dropped after a reboot. Default: 1 GiB; negative: none.
	Keep int64
	// Memory is how many bytes of queued objects may be held in memory
	// only, not yet written to local disk (see the package doc): beyond
	// it, a Put writes its object to disk. Default: 256 MiB; negative:
	// none (every object is written to disk at once).
	Memory int64
}

// Backend is a write-back backend over a remote one (see the package doc).
type Backend struct {
	remote backend.Backend
	dir    string
	opts   Options

	refMu sync.Mutex // serialises ref moves: check and queue are one step
	// syncMu: enqueues hold it shared while they write; Sync holds it
	// alone, so every sequence number below b.next is then whole on disk.
	syncMu sync.RWMutex

	mu       sync.Mutex
	cond     *sync.Cond          // signalled when an entry is queued or done, and at Close
	next     uint64              // sequence number of the next entry
	queue    []*entry            // entries not yet uploaded, in sequence order
	inflight int                 // object uploads running
	objects  map[string]*entry   // key -> latest queued object entry
	refs     map[string][]*entry // key -> queued ref entries, oldest first
	failing  error               // the last upload error, while uploads fail
	since    time.Time           // when uploads started failing
	lost     []Lost              // ref moves that lost their compare-and-swap
	uploaded uint64              // entries uploaded since Open
	known    map[string][]byte   // refs: the value last read from or written to the remote
	kept     map[string]int64    // uploaded objects kept locally: key -> size
	keptList []string            // their keys, oldest first
	keptSize int64
	synced   uint64 // the watermark: every entry up to it is fsync'd (see Sync)
	memBytes int64  // bytes of queued objects held in memory only
	closed   bool
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc
}

// entry is one queued write: an object, or a move of a ref.
type entry struct {
	Seq  uint64 `json:"seq"`
	Key  string `json:"key"`
	Size int64  `json:"size"`
	// Refs: the value the move replaces (PrevNone: the ref must not
	// exist). At upload the remote ref must hold Prev, or the move lost.
	Ref      bool      `json:"ref,omitempty"`
	Prev     []byte    `json:"prev,omitempty"`
	PrevNone bool      `json:"prev_none,omitempty"`
	Queued   time.Time `json:"queued"`
	// Check is the data's checksum ("crc32c:" and 8 hex digits), which a
	// restart verifies for entries written after the last Sync. Outboxes
	// of older versions (every entry fsync'd) have none.
	Check string `json:"check,omitempty"`

	data    []byte  // refs only: the new value (objects are read from mem or their file)
	mem     *[]byte // an object held in memory only (nil: on disk)
	free    func()  // gives mem back (to the pool, or to the caller of PutOwned)
	memUse  int     // readers of mem (an upload, a Get, Sync): it is recycled when none is left
	synced  bool    // data and record fsync'd
	started bool    // being uploaded
	done    bool
}

// Lost is a ref move whose compare-and-swap lost: another writer moved the
// ref first. The objects it points at are in the store.
type Lost struct {
	Key   string    // refs/WORKSPACE
	Value []byte    // the ref value that was not written
	Time  time.Time // when the loss was found
}

// Pending describes what is queued.
type Pending struct {
	Entries int       // queued writes not yet uploaded
	Bytes   int64     // their size
	Oldest  time.Time // when the oldest was queued (zero: none)
	// Failing is the last upload error while uploads fail (nil once one
	// succeeds), and Since when they started failing.
	Failing error
	Since   time.Time
	// Unsynced counts the queued writes not yet durable on local disk
	// (written, not fsync'd: see Sync).
	Unsynced int
	// Uploaded counts the writes uploaded since Open.
	Uploaded uint64
	// Lost lists the ref moves that lost their compare-and-swap.
	Lost []Lost
}

// writeBack reports whether key is written back (queued) rather than
// written through: packs, index files and snapshot records (immutable,
// content-addressed) and refs. Everything else (the config, leases) goes
// to the remote at once.
func writeBack(key string) bool {
	return strings.HasPrefix(key, "packs/") || strings.HasPrefix(key, "index/") ||
		strings.HasPrefix(key, "snapshots/") || strings.HasPrefix(key, "lost/") || isRef(key)
}

func isRef(key string) bool { return strings.HasPrefix(key, "refs/") }

// waitsForEarlier reports whether the object at key is uploaded only after
// every entry queued before it, like a ref move: a store index file (every
// machine on the store dedupes against the packs it lists: one in the
// remote before a pack it names would let another machine's snapshot,
// whose ref move waits only for its own queue, refer to a pack the remote
// may never get if this machine dies first) and a lost-snapshot record
// (other machines fork the snapshot it names).
func waitsForEarlier(key string) bool {
	return strings.HasPrefix(key, "index/") || strings.HasPrefix(key, "lost/")
}

// Open opens (creating it if needed) the outbox in dir over remote, and
// starts uploading what an earlier process left queued.
func Open(remote backend.Backend, dir string, opts Options) (*Backend, error) {
	if opts.Uploads <= 0 {
		opts.Uploads = 4
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Keep == 0 {
		opts.Keep = 1 << 30
	}
	if opts.Memory == 0 {
		opts.Memory = 256 << 20
	}
	for _, d := range []string{dir, filepath.Join(dir, "q"), filepath.Join(dir, "data"), filepath.Join(dir, "kept")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("outbox: %w", err)
		}
	}
	b := &Backend{remote: remote, dir: dir, opts: opts, objects: map[string]*entry{}, refs: map[string][]*entry{}, next: 1, kept: map[string]int64{}, known: map[string][]byte{}}
	b.cond = sync.NewCond(&b.mu)
	if err := b.load(); err != nil {
		return nil, err
	}
	// What survived a crash is whole: make it durable, so a later crash
	// does not check it again.
	if err := b.Sync(); err != nil {
		return nil, err
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.wg.Add(1)
	go b.run()
	return b, nil
}

// load reads the queue an earlier process left. An entry is queued once
// its record exists (written after its data, renamed into place). Entries
// up to the watermark were fsync'd and are trusted; later ones were not
// (see Sync): a crash of the machine may have left them torn, so each is
// checked against its checksum, and the first that fails is dropped with
// every later one (nothing durable depends on them: a Flush or ref move
// that returned would have moved the watermark past them). A record whose
// data is gone was uploaded: its removal did not reach the disk. Stray
// data files are removed.
func (b *Backend) load() error {
	w, err := readWatermark(b.dir)
	if err != nil {
		return fmt.Errorf("outbox %s: %w", b.dir, err)
	}
	b.synced = w
	names, err := os.ReadDir(filepath.Join(b.dir, "q"))
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	have := map[string]bool{}
	cut := uint64(0) // the first unsynced entry found torn (0: none)
	drop := func(seq uint64, why string) {
		if seq > w && (cut == 0 || seq < cut) {
			cut = seq
		}
		b.opts.Logf("outbox %s: queued write %d %s: dropped with the writes queued after it (never acknowledged as durable; they are made again)", b.dir, seq, why)
	}
	for _, n := range names {
		seq, err := strconv.ParseUint(strings.TrimSuffix(n.Name(), ".json"), 10, 64)
		if err != nil || !strings.HasSuffix(n.Name(), ".json") {
			os.Remove(filepath.Join(b.dir, "q", n.Name())) // a temporary file of a crashed write
			continue
		}
		raw, err := os.ReadFile(filepath.Join(b.dir, "q", n.Name()))
		if err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
		e := &entry{}
		if err := json.Unmarshal(raw, e); err != nil || e.Seq != seq || backend.ValidateKey(e.Key) != nil {
			if seq > w {
				drop(seq, "has a torn record")
				continue
			}
			return fmt.Errorf("outbox %s: queue record %s is corrupt (%v); move the outbox away to start afresh (its writes are then lost)", b.dir, n.Name(), err)
		}
		size, check, err := int64(-1), "", error(nil)
		if seq > w && e.Check != "" {
			size, check, err = fileCheck(b.dataPath(seq))
		} else {
			var fi os.FileInfo
			if fi, err = os.Stat(b.dataPath(seq)); err == nil {
				size, check = fi.Size(), e.Check
			}
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			os.Remove(filepath.Join(b.dir, "q", n.Name()))
			continue
		case err != nil:
			return fmt.Errorf("outbox %s: the data of queued write %s (%d): %w", b.dir, e.Key, seq, err)
		case size != e.Size || check != e.Check:
			if seq > w {
				drop(seq, "has torn data")
				continue
			}
			return fmt.Errorf("outbox %s: the data of queued write %s (%d) is short (%d bytes of %d); move the outbox away to start afresh (its writes are then lost)", b.dir, e.Key, seq, size, e.Size)
		}
		if e.Ref {
			if e.data, err = os.ReadFile(b.dataPath(seq)); err != nil {
				return fmt.Errorf("outbox %s: the value of queued ref move %d: %w", b.dir, seq, err)
			}
		}
		e.synced = seq <= w || e.Check == ""
		have[strconv.FormatUint(seq, 10)] = true
		b.queue = append(b.queue, e)
		b.next = max(b.next, seq+1)
	}
	if cut != 0 {
		b.queue = slices.DeleteFunc(b.queue, func(e *entry) bool {
			if e.Seq < cut {
				return false
			}
			os.Remove(b.recordPath(e.Seq))
			delete(have, strconv.FormatUint(e.Seq, 10))
			return true
		})
		for _, n := range names {
			if seq, err := strconv.ParseUint(strings.TrimSuffix(n.Name(), ".json"), 10, 64); err == nil && seq >= cut {
				os.Remove(filepath.Join(b.dir, "q", n.Name()))
			}
		}
	}
	b.next = max(b.next, w+1)
	sort.Slice(b.queue, func(i, j int) bool { return b.queue[i].Seq < b.queue[j].Seq })
	for _, e := range b.queue {
		b.index(e)
	}
	datas, _ := os.ReadDir(filepath.Join(b.dir, "data"))
	for _, d := range datas {
		if !have[d.Name()] {
			os.Remove(filepath.Join(b.dir, "data", d.Name()))
		}
	}
	// Kept objects, oldest first. They are not fsync'd (a cache: the
	// remote has them), so a crash of the machine may have torn them: after
	// a reboot they are dropped.
	if !sameBoot(b.dir) {
		os.RemoveAll(filepath.Join(b.dir, "kept"))
		if err := os.MkdirAll(filepath.Join(b.dir, "kept"), 0o700); err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
	}
	kept, _ := os.ReadDir(filepath.Join(b.dir, "kept"))
	type k struct {
		key  string
		size int64
		mod  time.Time
	}
	var ks []k
	for _, d := range kept {
		raw, err := hex.DecodeString(d.Name())
		fi, ierr := d.Info()
		if err != nil || ierr != nil || backend.ValidateKey(string(raw)) != nil {
			os.Remove(filepath.Join(b.dir, "kept", d.Name()))
			continue
		}
		ks = append(ks, k{string(raw), fi.Size(), fi.ModTime()})
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].mod.Before(ks[j].mod) })
	for _, x := range ks {
		b.kept[x.key] = x.size
		b.keptList = append(b.keptList, x.key)
		b.keptSize += x.size
	}
	b.evictKept()
	return nil
}

// sameBoot reports whether the machine has not rebooted since the last
// process that opened the outbox in dir, and records this boot for the
// next one.
func sameBoot(dir string) bool {
	p := filepath.Join(dir, "boot")
	now, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return false // no boot ID here: assume a reboot
	}
	last, err := os.ReadFile(p)
	if err == nil && bytes.Equal(last, now) {
		return true
	}
	// Not fsync'd: if this write is lost, the next process drops the kept
	// objects once more, which is safe.
	os.WriteFile(p, now, 0o600)
	return false
}

func (b *Backend) keptPath(key string) string {
	return filepath.Join(b.dir, "kept", hex.EncodeToString([]byte(key)))
}

// evictKept drops the oldest kept objects beyond Keep. b.mu is held (or
// the backend is not shared yet).
func (b *Backend) evictKept() {
	for b.keptSize > max(b.opts.Keep, 0) && len(b.keptList) > 0 {
		key := b.keptList[0]
		b.keptList = b.keptList[1:]
		if size, ok := b.kept[key]; ok {
			b.keptSize -= size
			delete(b.kept, key)
			os.Remove(b.keptPath(key))
		}
	}
}

func (b *Backend) index(e *entry) {
	if e.Ref {
		b.refs[e.Key] = append(b.refs[e.Key], e)
	} else {
		b.objects[e.Key] = e
	}
}

func (b *Backend) dataPath(seq uint64) string {
	return filepath.Join(b.dir, "data", strconv.FormatUint(seq, 10))
}

// enqueue writes an entry (data, then its record) and queues it. Objects
// are written without fsync: most are uploaded before anything needs them
// durable, and Sync makes the rest durable when something does (the
// store's Flush, a ref move). A ref move is written durably, after a Sync
// of everything queued before it, so a durable ref never names objects
// that a crash could lose.
func (b *Backend) enqueue(e *entry, data io.Reader) error {
	return b.enqueueOwned(e, data, nil, nil)
}

// enqueueOwned is enqueue; with owned (the bytes data reads), an object
// held in memory keeps owned itself instead of a copy, and release is
// called once it is no longer needed (at once if it goes to disk).
func (b *Backend) enqueueOwned(e *entry, data io.Reader, owned []byte, release func()) error {
	if e.Ref {
		if err := b.Sync(); err != nil {
			return fmt.Errorf("outbox: queue %s: %w", e.Key, err)
		}
	}
	b.syncMu.RLock()
	defer b.syncMu.RUnlock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	e.Seq = b.next
	b.next++
	b.mu.Unlock()
	e.Queued = time.Now().UTC()
	if !e.Ref {
		if owned != nil && b.reserveMemory(int64(len(owned))) {
			e.mem, e.free, e.Size = &owned, release, int64(len(owned))
			b.insert(e)
			return nil
		}
		if owned == nil {
			if mem, ok := b.takeMemory(data); ok {
				e.mem, e.free, e.Size = mem, func() { putBuf(mem) }, int64(len(*mem))
				b.insert(e)
				return nil
			}
		}
	}
	durable := e.Ref
	n, sum, err := writeFile(b.dataPath(e.Seq), data, durable)
	if err != nil {
		return fmt.Errorf("outbox: queue %s: %w", e.Key, err)
	}
	e.Size, e.Check = n, checkString(sum)
	rec, err := json.Marshal(e)
	if err != nil {
		return err
	}
	p := b.recordPath(e.Seq)
	if _, _, err := writeFile(p+".tmp", bytes.NewReader(rec), durable); err != nil {
		os.Remove(b.dataPath(e.Seq))
		return fmt.Errorf("outbox: queue %s: %w", e.Key, err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("outbox: queue %s: %w", e.Key, err)
	}
	if durable {
		if err := b.syncDirs(); err != nil {
			return fmt.Errorf("outbox: queue %s: %w", e.Key, err)
		}
	}
	e.synced = durable
	b.insert(e)
	if owned != nil {
		release() // written to disk: the bytes are no longer needed
	}
	return nil
}

// insert queues an entry that is whole (in memory or on disk).
func (b *Backend) insert(e *entry) {
	b.mu.Lock()
	// The queue is in sequence order, and a later entry may have been
	// written first. (An entry that depends on another, a ref move on the
	// objects it names, was queued after that one returned: it never
	// overtakes it.)
	i := sort.Search(len(b.queue), func(i int) bool { return b.queue[i].Seq > e.Seq })
	b.queue = slices.Insert(b.queue, i, e)
	b.index(e)
	b.cond.Broadcast()
	b.mu.Unlock()
}

// takeMemory copies an object into a memory buffer if it fits within
// Options.Memory, and reports whether it did; a body whose size cannot be
// learnt (it does not seek) goes to disk.
func (b *Backend) takeMemory(data io.Reader) (*[]byte, bool) {
	sk, ok := data.(io.Seeker)
	if !ok || b.opts.Memory < 0 {
		return nil, false
	}
	cur, err := sk.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, false
	}
	end, err := sk.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, false
	}
	if _, err := sk.Seek(cur, io.SeekStart); err != nil {
		return nil, false
	}
	n := end - cur
	if !b.reserveMemory(n) {
		return nil, false
	}
	buf := getBuf(int(n))
	if _, err := io.ReadFull(data, *buf); err != nil {
		putBuf(buf)
		b.mu.Lock()
		b.memBytes -= n
		b.mu.Unlock()
		sk.Seek(cur, io.SeekStart) // the disk path reads it again
		return nil, false
	}
	return buf, true
}

// reserveMemory counts n more bytes held in memory, if they fit within
// Options.Memory.
func (b *Backend) reserveMemory(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opts.Memory < 0 || b.memBytes+n > b.opts.Memory {
		return false
	}
	b.memBytes += n
	return true
}

// memBufs recycles the buffers of objects held in memory (packs are all
// about the same size): fresh memory costs a page fault per page touched.
var memBufs sync.Pool

func getBuf(n int) *[]byte {
	if b, ok := memBufs.Get().(*[]byte); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}

func putBuf(b *[]byte) { memBufs.Put(b) }

// useMem returns e's memory buffer, if it has one, counted as in use until
// doneMem. b.mu is held.
func (b *Backend) useMem(e *entry) *[]byte {
	if e.mem != nil {
		e.memUse++
	}
	return e.mem
}

// doneMem ends a use of e's memory buffer, and frees it once it has no
// user and is no longer needed: the object is uploaded or on disk. b.mu is
// held.
func (b *Backend) doneMem(e *entry) {
	e.memUse--
	b.freeMem(e)
}

func (b *Backend) freeMem(e *entry) {
	if e.mem != nil && e.memUse == 0 && (e.done || e.synced) {
		b.memBytes -= int64(len(*e.mem))
		e.free()
		e.mem, e.free = nil, nil
	}
}

func (b *Backend) recordPath(seq uint64) string {
	return filepath.Join(b.dir, "q", strconv.FormatUint(seq, 10)+".json")
}

// Sync makes every entry queued before it was called durable on local
// disk: their data and records fsync'd, then the watermark that tells a
// restart which entries it may trust without reading them. Entries
// uploaded meanwhile need nothing. chunkstore.Store.Flush calls it, so a
// flushed store survives a crash of the machine as before; what a crash
// catches between a Put and the next Sync is checked at the next Open
// (see load).
func (b *Backend) Sync() error {
	b.syncMu.Lock() // waits for enqueues in progress: all below b.next are whole
	defer b.syncMu.Unlock()
	b.mu.Lock()
	target := b.next - 1
	if target <= b.synced {
		b.mu.Unlock()
		return nil
	}
	type job struct {
		e   *entry
		mem *[]byte // write it from here; nil: on disk, fsync it
	}
	var jobs []job
	for _, e := range b.queue {
		if !e.synced {
			jobs = append(jobs, job{e, b.useMem(e)})
		}
	}
	b.mu.Unlock()
	var err error
	for _, j := range jobs {
		if err == nil {
			err = b.syncEntry(j.e, j.mem)
		}
		if j.mem != nil {
			b.mu.Lock()
			b.doneMem(j.e)
			b.mu.Unlock()
		}
	}
	if err == nil {
		err = b.syncDirs()
	}
	if err == nil {
		err = writeWatermark(b.dir, target)
	}
	if err != nil {
		return fmt.Errorf("outbox: sync: %w", err)
	}
	b.mu.Lock()
	for _, e := range b.queue {
		if e.Seq <= target {
			e.synced = true
			b.freeMem(e)
		}
	}
	b.synced = max(b.synced, target)
	b.mu.Unlock()
	return nil
}

// syncEntry makes one queued entry durable: an object held in memory is
// written to disk (data, then its record), one on disk is fsync'd. An
// entry uploaded meanwhile needs nothing.
func (b *Backend) syncEntry(e *entry, mem *[]byte) error {
	if mem == nil {
		for _, p := range []string{b.dataPath(e.Seq), b.recordPath(e.Seq)} {
			// Gone: uploaded meanwhile (and so no longer needed here).
			if err := syncFile(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	b.mu.Lock()
	done, rec := e.done, *e
	b.mu.Unlock()
	if done {
		return nil
	}
	_, sum, err := writeFile(b.dataPath(e.Seq), bytes.NewReader(*mem), true)
	if err != nil {
		return err
	}
	rec.Check = checkString(sum)
	raw, err := json.Marshal(&rec)
	if err != nil {
		return err
	}
	p := b.recordPath(e.Seq)
	if _, _, err := writeFile(p+".tmp", bytes.NewReader(raw), true); err != nil {
		return err
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e.Check = rec.Check
	if e.done {
		// Uploaded while it was written: finish found no file to remove.
		os.Remove(p)
		os.Remove(b.dataPath(e.Seq))
	}
	return nil
}

func (b *Backend) syncDirs() error {
	for _, d := range []string{"data", "q"} {
		if err := syncDir(filepath.Join(b.dir, d)); err != nil {
			return err
		}
	}
	return nil
}

// The watermark file: every entry up to the sequence number it holds was
// fsync'd (its absence: none, or an outbox of an older version, whose
// entries carry no checksum and were all fsync'd).
const watermarkName = "synced"

func readWatermark(dir string) (uint64, error) {
	raw, err := os.ReadFile(filepath.Join(dir, watermarkName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the watermark %s is corrupt (%q); move the outbox away to start afresh (its writes are then lost)", filepath.Join(dir, watermarkName), raw)
	}
	return n, nil
}

func writeWatermark(dir string, seq uint64) error {
	p := filepath.Join(dir, watermarkName)
	if _, _, err := writeFile(p+".tmp", strings.NewReader(strconv.FormatUint(seq, 10)+"\n"), true); err != nil {
		return err
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return err
	}
	return syncDir(dir)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checkString(sum uint32) string { return fmt.Sprintf("crc32c:%08x", sum) }

// copyBufs are writeFile's copy buffers: a pack is written in 1 MiB writes.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// writeFile writes r to a new file p and returns its size and CRC-32C;
// durable: fsync'd before it returns.
func writeFile(p string, r io.Reader, durable bool) (int64, uint32, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, 0, err
	}
	h := crc32.New(castagnoli)
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(f, io.TeeReader(r, h), *buf)
	copyBufs.Put(buf)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p)
	}
	return n, h.Sum32(), err
}

// fileCheck reads the file p and returns its size and CRC-32C.
func fileCheck(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(h, f, *buf)
	copyBufs.Put(buf)
	return n, checkString(h.Sum32()), err
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// contentTag is the ETag the outbox gives a ref value: a hash of its
// content, the same whether the value is queued here or in the remote (a
// ref's value carries a generation, so equal content is the same version).
func contentTag(data []byte) string {
	h := blake3.Sum256(data)
	return "c-" + hex.EncodeToString(h[:16])
}

// objectTag is the ETag the outbox gives a written-back object that is not
// a ref (a pack, index file or snapshot record): these are
// content-addressed, so a key names one content, and the tag names the key
// and size. It is the same whether the object is queued here, kept here or
// in the remote: a remote ETag would change it at upload, under a caller
// that holds the tag Put returned.
func objectTag(key string, size int64) string {
	h := blake3.Sum256([]byte(key))
	return "k-" + hex.EncodeToString(h[:8]) + "-" + strconv.FormatInt(size, 10)
}

// refView returns a ref's current value as this process sees it: the
// latest queued move, else the remote's.
func (b *Backend) refView(ctx context.Context, key string) ([]byte, bool, error) {
	b.mu.Lock()
	if q := b.refs[key]; len(q) > 0 {
		v := q[len(q)-1].data
		b.mu.Unlock()
		return v, true, nil
	}
	b.mu.Unlock()
	data, err := backend.ReadAll(ctx, b.remote, key)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case errors.Is(err, backend.ErrNotFound):
		delete(b.known, key)
		return nil, false, nil
	case err != nil:
		// The remote is unreachable: go on from the value last seen there.
		// A move queued on it is checked against the remote at upload.
		if v, ok := b.known[key]; ok {
			return v, true, nil
		}
		return nil, false, err
	}
	b.known[key] = data
	return data, true, nil
}

// Get implements backend.Backend.
func (b *Backend) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if isRef(key) {
		data, ok, err := b.refView(ctx, key)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("get %s: %w", key, backend.ErrNotFound)
		}
		return section(key, data, offset, length)
	}
	b.mu.Lock()
	e := b.objects[key]
	size, kept := b.kept[key]
	b.mu.Unlock()
	if e == nil && kept {
		if f, err := os.Open(b.keptPath(key)); err == nil {
			return sectionFile(f, key, size, offset, length)
		}
	}
	if e == nil {
		return b.remote.Get(ctx, key, offset, length)
	}
	b.mu.Lock()
	mem := b.useMem(e)
	b.mu.Unlock()
	if mem != nil {
		release := func() {
			b.mu.Lock()
			b.doneMem(e)
			b.mu.Unlock()
		}
		rc, err := section(key, *mem, offset, length)
		if err != nil {
			release()
			return nil, err
		}
		return &memReader{ReadCloser: rc, release: release}, nil
	}
	f, err := os.Open(b.dataPath(e.Seq))
	if err != nil {
		// Uploaded and removed meanwhile: the remote has it.
		return b.remote.Get(ctx, key, offset, length)
	}
	return sectionFile(f, key, e.Size, offset, length)
}

// memReader reads an object held in memory, which stays allocated until
// the reader is closed.
type memReader struct {
	io.ReadCloser
	release func()
	once    sync.Once
}

func (r *memReader) Close() error {
	r.once.Do(r.release)
	return nil
}

// sectionFile reads length bytes at offset of a local copy of key.
func sectionFile(f *os.File, key string, size, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 || offset > 0 && offset >= size {
		f.Close()
		return nil, fmt.Errorf("get %s: offset %d of %d bytes: %w", key, offset, size, backend.ErrRange)
	}
	n := size - offset
	if length >= 0 && length < n {
		n = length
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, offset, n), f}, nil
}

func section(key string, data []byte, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 || offset > 0 && offset >= int64(len(data)) {
		return nil, fmt.Errorf("get %s: offset %d of %d bytes: %w", key, offset, len(data), backend.ErrRange)
	}
	data = data[offset:]
	if length >= 0 && length < int64(len(data)) {
		data = data[:length]
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// Stat implements backend.Backend.
func (b *Backend) Stat(ctx context.Context, key string) (backend.Info, error) {
	if isRef(key) {
		data, ok, err := b.refView(ctx, key)
		if err != nil {
			return backend.Info{}, err
		}
		if !ok {
			return backend.Info{}, fmt.Errorf("stat %s: %w", key, backend.ErrNotFound)
		}
		return backend.Info{Key: key, Size: int64(len(data)), ETag: contentTag(data)}, nil
	}
	b.mu.Lock()
	e := b.objects[key]
	b.mu.Unlock()
	if e != nil {
		return backend.Info{Key: key, Size: e.Size, ETag: objectTag(key, e.Size), ModTime: e.Queued}, nil
	}
	info, err := b.remote.Stat(ctx, key)
	if err == nil && writeBack(key) {
		info.ETag = objectTag(key, info.Size)
	}
	return info, err
}

// Put implements backend.Backend: packs, index files and snapshot records
// are queued; a ref move is checked against the ref as this process sees
// it and queued; anything else is written through.
func (b *Backend) Put(ctx context.Context, key string, body io.ReadSeeker, cond backend.Condition) (backend.Info, error) {
	if err := backend.ValidateKey(key); err != nil {
		return backend.Info{}, err
	}
	if err := cond.Validate(); err != nil {
		return backend.Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	if !writeBack(key) {
		return b.remote.Put(ctx, key, body, cond)
	}
	if !isRef(key) {
		if cond != (backend.Condition{}) {
			return backend.Info{}, fmt.Errorf("put %s: conditional writes of immutable objects are not queued", key)
		}
		e := &entry{Key: key}
		if err := b.enqueue(e, body); err != nil {
			return backend.Info{}, err
		}
		return backend.Info{Key: key, Size: e.Size, ETag: objectTag(key, e.Size), ModTime: e.Queued}, nil
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return backend.Info{}, fmt.Errorf("put %s: %w", key, err)
	}
	b.refMu.Lock()
	defer b.refMu.Unlock()
	prev, exists, err := b.refView(ctx, key)
	switch {
	case err != nil && cond.IfNoneMatch:
		// The remote is unreachable and this outbox has neither seen the
		// ref there nor queued a move of it (refView answers from those):
		// nothing here says it exists. The create is queued; at upload
		// moveRef creates it only if it still does not exist, and reports
		// the move as lost if another writer created it meanwhile.
		prev, exists = nil, false
	case err != nil:
		return backend.Info{}, fmt.Errorf("put %s: read the ref: %w", key, err)
	}
	switch {
	case cond.IfNoneMatch && exists:
		return backend.Info{}, fmt.Errorf("put %s: exists: %w", key, backend.ErrConflict)
	case cond.IfMatch != "" && (!exists || contentTag(prev) != cond.IfMatch):
		return backend.Info{}, fmt.Errorf("put %s: changed: %w", key, backend.ErrConflict)
	}
	e := &entry{Key: key, Ref: true, data: data, Prev: prev, PrevNone: !exists}
	if err := b.enqueue(e, bytes.NewReader(data)); err != nil {
		return backend.Info{}, err
	}
	return backend.Info{Key: key, Size: int64(len(data)), ETag: contentTag(data), ModTime: e.Queued}, nil
}

// PutOwned is Put (unconditional) of an object whose bytes the outbox
// takes instead of copying: it calls release once it no longer needs data
// (uploaded or written to disk; possibly after PutOwned returns). On an
// error nothing is taken: release is not called. chunkstore hands its pack
// buffers over this way, saving a copy of everything it uploads.
func (b *Backend) PutOwned(ctx context.Context, key string, data []byte, release func()) (backend.Info, error) {
	if err := backend.ValidateKey(key); err != nil {
		return backend.Info{}, err
	}
	if !writeBack(key) || isRef(key) {
		info, err := b.Put(ctx, key, bytes.NewReader(data), backend.Condition{})
		if err == nil {
			release()
		}
		return info, err
	}
	e := &entry{Key: key}
	if err := b.enqueueOwned(e, bytes.NewReader(data), data, release); err != nil {
		return backend.Info{}, err
	}
	return backend.Info{Key: key, Size: e.Size, ETag: objectTag(key, e.Size), ModTime: e.Queued}, nil
}

// List implements backend.Backend: the remote's objects and the queued
// ones, merged in key order.
func (b *Backend) List(ctx context.Context, prefix string, fn func(backend.Info) error) error {
	var local []backend.Info
	b.mu.Lock()
	for k, e := range b.objects {
		if strings.HasPrefix(k, prefix) {
			local = append(local, backend.Info{Key: k, Size: e.Size, ETag: objectTag(k, e.Size), ModTime: e.Queued})
		}
	}
	for k, q := range b.refs {
		if strings.HasPrefix(k, prefix) && len(q) > 0 {
			d := q[len(q)-1].data
			local = append(local, backend.Info{Key: k, Size: int64(len(d)), ETag: contentTag(d)})
		}
	}
	b.mu.Unlock()
	sort.Slice(local, func(i, j int) bool { return local[i].Key < local[j].Key })
	i := 0
	err := b.remote.List(ctx, prefix, func(info backend.Info) error {
		for ; i < len(local) && local[i].Key < info.Key; i++ {
			if err := fn(local[i]); err != nil {
				return err
			}
		}
		if i < len(local) && local[i].Key == info.Key {
			info = local[i]
			i++
		} else if writeBack(info.Key) && !isRef(info.Key) {
			info.ETag = objectTag(info.Key, info.Size)
		}
		return fn(info)
	})
	if err != nil {
		return err
	}
	for ; i < len(local); i++ {
		if err := fn(local[i]); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements backend.Backend. A key with a queued write cannot be
// deleted until it is uploaded.
func (b *Backend) Delete(ctx context.Context, key string) error {
	b.mu.Lock()
	queued := b.objects[key] != nil || len(b.refs[key]) > 0
	b.mu.Unlock()
	if queued {
		return fmt.Errorf("delete %s: a write of it is still queued for upload: %w", key, backend.ErrConflict)
	}
	return b.remote.Delete(ctx, key)
}

// Properties implements backend.Backend: the remote's.
func (b *Backend) Properties() backend.Properties { return b.remote.Properties() }

// Close stops uploading; what is queued stays in the outbox (written to
// disk) for the next Open. It does not close the remote backend.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	// Objects held in memory go to disk, so that the next Open has them.
	err := b.Sync()
	b.mu.Lock()
	b.cond.Broadcast()
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	return err
}

// Pending reports what is queued.
func (b *Backend) Pending() Pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := Pending{Failing: b.failing, Since: b.since, Uploaded: b.uploaded, Lost: slices.Clone(b.lost)}
	for _, e := range b.queue {
		if !e.done {
			p.Entries++
			p.Bytes += e.Size
			if !e.synced {
				p.Unsynced++
			}
			if p.Oldest.IsZero() {
				p.Oldest = e.Queued
			}
		}
	}
	return p
}

// Wait returns once everything queued before it was called is uploaded
// (or, for a ref move, found lost), or when ctx ends.
func (b *Backend) Wait(ctx context.Context) error {
	b.mu.Lock()
	target := b.next - 1
	b.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if len(b.queue) == 0 || b.queue[0].Seq > target {
			return nil
		}
		if err := ctx.Err(); err != nil {
			if b.failing != nil {
				return fmt.Errorf("%w: %d writes still queued; uploads fail since %s: %v", err, len(b.queue), b.since.Format(time.RFC3339), b.failing)
			}
			return fmt.Errorf("%w: %d writes still queued", err, len(b.queue))
		}
		if b.closed {
			return ErrClosed
		}
		b.cond.Wait()
	}
}

// run uploads the queue in order: objects several at a time; a ref move
// only once every entry before it is uploaded, so a ref never points at
// objects the remote does not have.
func (b *Backend) run() {
	defer b.wg.Done()
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		var e *entry
		for !b.closed {
			if b.inflight < b.opts.Uploads {
				if e = b.startable(); e != nil {
					break
				}
			}
			b.cond.Wait()
		}
		if b.closed {
			for b.inflight > 0 {
				b.cond.Wait()
			}
			return
		}
		e.started = true
		if e.Ref { // every entry before it is done
			b.mu.Unlock()
			ok, lost := b.moveRef(e)
			b.mu.Lock()
			if !ok { // closing
				e.started = false
				continue
			}
			b.finish(e, lost)
			continue
		}
		b.inflight++
		go func() {
			ok := b.upload(e)
			b.mu.Lock()
			b.inflight--
			if ok {
				b.finish(e, false)
			} else {
				e.started = false
			}
			b.cond.Broadcast()
			b.mu.Unlock()
		}()
	}
}

// startable returns the next entry to start, if one may start: the first not
// started, unless it is a ref move with unfinished entries before it (then
// nothing may start: entries after a ref move wait for it), and skipping
// objects that wait for the entries before them (waitsForEarlier). b.mu is
// held.
func (b *Backend) startable() *entry {
	for i, e := range b.queue {
		switch {
		case e.started:
		case e.Ref && i > 0:
			return nil
		case waitsForEarlier(e.Key) && i > 0:
		default:
			return e
		}
	}
	return nil
}

// finish removes an uploaded (or lost) entry. b.mu is held.
func (b *Backend) finish(e *entry, lost bool) {
	e.done = true
	b.freeMem(e)
	i := slices.Index(b.queue, e)
	b.queue = slices.Delete(b.queue, i, i+1)
	if e.Ref {
		q := b.refs[e.Key]
		if j := slices.Index(q, e); j >= 0 {
			q = slices.Delete(q, j, j+1)
		}
		if len(q) == 0 {
			delete(b.refs, e.Key)
		} else {
			b.refs[e.Key] = q
		}
		if lost {
			l := Lost{Key: e.Key, Value: e.data, Time: time.Now()}
			b.lost = append(b.lost, l)
			if b.opts.OnLost != nil {
				go b.opts.OnLost(l)
			}
		}
	} else if b.objects[e.Key] == e {
		delete(b.objects, e.Key)
	}
	if !lost {
		b.uploaded++
	}
	os.Remove(filepath.Join(b.dir, "q", strconv.FormatUint(e.Seq, 10)+".json"))
	if !e.Ref && b.opts.Keep > 0 && os.Rename(b.dataPath(e.Seq), b.keptPath(e.Key)) == nil {
		if old, ok := b.kept[e.Key]; ok {
			b.keptSize -= old
		} else {
			b.keptList = append(b.keptList, e.Key)
		}
		b.kept[e.Key] = e.Size
		b.keptSize += e.Size
		b.evictKept()
	}
	os.Remove(b.dataPath(e.Seq))
	b.cond.Broadcast()
}

// retry runs op until it succeeds or the outbox closes, backing off
// between failures and logging the first failure and the recovery.
func (b *Backend) retry(what string, op func() error) bool {
	wait := b.opts.MinBackoff
	for {
		err := op()
		b.mu.Lock()
		if err == nil {
			if b.failing != nil {
				b.opts.Logf("outbox: uploads work again (they failed since %s)", b.since.Format(time.RFC3339))
				b.failing = nil
			}
			b.mu.Unlock()
			return true
		}
		if b.failing == nil {
			b.since = time.Now()
			b.opts.Logf("outbox: upload of %s failed: %v; retrying with backoff (writes stay queued here)", what, err)
		}
		b.failing = err
		b.mu.Unlock()
		select {
		case <-b.ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(wait*2, b.opts.MaxBackoff)
	}
}

// upload writes a queued object to the remote.
func (b *Backend) upload(e *entry) bool {
	return b.retry(e.Key, func() error {
		b.mu.Lock()
		mem := b.useMem(e)
		b.mu.Unlock()
		if mem != nil {
			_, err := b.remote.Put(b.ctx, e.Key, bytes.NewReader(*mem), backend.Condition{})
			b.mu.Lock()
			b.doneMem(e)
			b.mu.Unlock()
			return err
		}
		f, err := os.Open(b.dataPath(e.Seq))
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = b.remote.Put(b.ctx, e.Key, f, backend.Condition{})
		return err
	})
}

// moveRef applies a queued ref move to the remote by compare-and-swap: the
// remote must hold the value the move replaced (or already the new one: a
// crash after the write, before the entry was removed). Anything else is
// a lost race, reported (true); the objects stay in the store.
func (b *Backend) moveRef(e *entry) (ok, lost bool) {
	ok = b.retry(e.Key, func() error {
		info, err := b.remote.Stat(b.ctx, e.Key)
		var cur []byte
		exists := err == nil
		switch {
		case errors.Is(err, backend.ErrNotFound):
		case err != nil:
			return err
		default:
			if cur, err = backend.ReadAll(b.ctx, b.remote, e.Key); err != nil {
				if errors.Is(err, backend.ErrNotFound) {
					return errors.New("the ref changed while read")
				}
				return err
			}
		}
		var cond backend.Condition
		switch {
		case exists && bytes.Equal(cur, e.data):
			return nil // written before a crash
		case !exists && e.PrevNone:
			cond.IfNoneMatch = true
		case exists && !e.PrevNone && bytes.Equal(cur, e.Prev):
			cond.IfMatch = info.ETag
		default:
			lost = true
			return nil
		}
		_, err = b.remote.Put(b.ctx, e.Key, bytes.NewReader(e.data), cond)
		if err == nil {
			b.mu.Lock()
			b.known[e.Key] = e.data
			b.mu.Unlock()
		}
		if errors.Is(err, backend.ErrConflict) || errors.Is(err, backend.ErrNotFound) {
			return fmt.Errorf("the ref moved during the compare-and-swap: %w", err) // look again
		}
		return err
	})
	if lost {
		b.opts.Logf("outbox: %s moved elsewhere before this process's move reached the store: the move is dropped; the snapshot it named is in the store (fork it to keep it)", e.Key)
	}
	return ok, lost
}
