// Package chunkstoretest has helpers for tests that need a real store: a
// local backend in a temporary directory, and a fault-injecting backend
// wrapper.
package chunkstoretest

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
)

// LocalBackend returns a local backend in a fresh temporary directory.
func LocalBackend(tb testing.TB) *local.Backend {
	tb.Helper()
	be, err := local.Open(tb.TempDir(), local.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { be.Close() })
	return be
}

// NewStore initialises a store on be and opens it; the store is closed at
// the end of the test.
func NewStore(tb testing.TB, be backend.Backend, init chunkstore.InitOptions, opts chunkstore.Options) *chunkstore.Store {
	tb.Helper()
	ctx := context.Background()
	if _, err := chunkstore.Init(ctx, be, init); err != nil {
		tb.Fatal(err)
	}
	s, err := chunkstore.Open(ctx, be, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Op names a backend operation for fault injection.
type Op string

// Operations a Faulty backend can fail.
const (
	OpGet    Op = "get"
	OpPut    Op = "put"
	OpStat   Op = "stat"
	OpList   Op = "list"
	OpDelete Op = "delete"
)

// Faulty wraps a backend and fails chosen operations. It also counts calls.
// Safe for concurrent use.
type Faulty struct {
	backend.Backend
	// Remote makes Properties report a non-local backend (so stores use
	// their local cache in front of it).
	Remote bool

	mu     sync.Mutex
	rules  []rule
	counts map[string]int
}

type rule struct {
	op     Op
	prefix string
	times  int // remaining failures; <0 forever
	err    error
}

// NewFaulty wraps be.
func NewFaulty(be backend.Backend) *Faulty {
	return &Faulty{Backend: be, counts: make(map[string]int)}
}

// Fail makes the next n operations op on keys starting with prefix fail
// with err (n < 0: until Heal).
func (f *Faulty) Fail(op Op, prefix string, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, rule{op: op, prefix: prefix, times: n, err: err})
}

// Heal removes every failure rule.
func (f *Faulty) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Count returns how many times op was called on keys starting with prefix.
func (f *Faulty) Count(op Op, prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for k, c := range f.counts {
		if o, key, _ := strings.Cut(k, " "); o == string(op) && strings.HasPrefix(key, prefix) {
			n += c
		}
	}
	return n
}

func (f *Faulty) check(op Op, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[string(op)+" "+key]++
	for i := range f.rules {
		r := &f.rules[i]
		if r.op == op && strings.HasPrefix(key, r.prefix) && r.times != 0 {
			if r.times > 0 {
				r.times--
			}
			return r.err
		}
	}
	return nil
}

// Get implements backend.Backend.
func (f *Faulty) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := f.check(OpGet, key); err != nil {
		return nil, err
	}
	return f.Backend.Get(ctx, key, off, n)
}

// Put implements backend.Backend.
func (f *Faulty) Put(ctx context.Context, key string, body io.ReadSeeker, cond backend.Condition) (backend.Info, error) {
	if err := f.check(OpPut, key); err != nil {
		return backend.Info{}, err
	}
	return f.Backend.Put(ctx, key, body, cond)
}

// Stat implements backend.Backend.
func (f *Faulty) Stat(ctx context.Context, key string) (backend.Info, error) {
	if err := f.check(OpStat, key); err != nil {
		return backend.Info{}, err
	}
	return f.Backend.Stat(ctx, key)
}

// List implements backend.Backend.
func (f *Faulty) List(ctx context.Context, prefix string, fn func(backend.Info) error) error {
	if err := f.check(OpList, prefix); err != nil {
		return err
	}
	return f.Backend.List(ctx, prefix, fn)
}

// Delete implements backend.Backend.
func (f *Faulty) Delete(ctx context.Context, key string) error {
	if err := f.check(OpDelete, key); err != nil {
		return err
	}
	return f.Backend.Delete(ctx, key)
}

// Properties implements backend.Backend.
func (f *Faulty) Properties() backend.Properties {
	p := f.Backend.Properties()
	if f.Remote {
		p.Local = false
	}
	return p
}
