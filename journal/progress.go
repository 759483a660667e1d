package journal

import (
	"io"
	"sync/atomic"
)

// Progress counts the work of the journal's long operations (a snapshot,
// a restore): what the CLI shows on a terminal while it waits. Reading it
// never waits for the operation.
type Progress struct {
	Op    string `json:"op"`    // "snapshot" or "restore"; "" before the first
	Busy  bool   `json:"busy"`  // Op is running; else the counts are its totals
	Files uint64 `json:"files"` // snapshot: changed files stored; restore: entries written
	Bytes uint64 `json:"bytes"` // snapshot: bytes of changed files read so far
}

// progress is the journal's running Progress.
type progress struct {
	op    atomic.Pointer[string]
	busy  atomic.Bool
	files atomic.Uint64
	bytes atomic.Uint64
}

func (p *progress) start(op string) {
	p.files.Store(0)
	p.bytes.Store(0)
	p.op.Store(&op)
	p.busy.Store(true)
}

func (p *progress) done() { p.busy.Store(false) }

// Progress returns the counts of the running (or last) long operation.
func (j *Journal) Progress() Progress {
	out := Progress{Busy: j.prog.busy.Load(), Files: j.prog.files.Load(), Bytes: j.prog.bytes.Load()}
	if op := j.prog.op.Load(); op != nil {
		out.Op = *op
	}
	return out
}

// countingReader counts the bytes read through it into a progress.
type countingReader struct {
	r io.ReaderAt
	p *progress
}

func (c countingReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(b, off)
	c.p.bytes.Add(uint64(n))
	return n, err
}
