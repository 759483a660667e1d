package chunkstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/s3"
	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/internal/s3fault"
)

// Reads of a remote store through a bad network (a fault-injecting proxy
// between the store and a real S3 server): transient faults are retried,
// corrupted bodies never come back as data, and a dead S3 fails the read
// in bounded time with an error that names the object.
func TestStore_S3Faults(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	proxy := s3fault.Start(t, srv.Endpoint)
	cfg := srv.Config(bucket, "faults")
	cfg.Endpoint = proxy.URL()
	open := func() (*s3.Backend, *chunkstore.Store) {
		t.Helper()
		be, err := s3.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Close() })
		st, err := chunkstore.Open(ctx, be, chunkstore.Options{CacheDir: t.TempDir(), ReadAhead: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return be, st
	}
	be, err := s3.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chunkstore.Init(ctx, be, chunkstore.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	be.Close()
	_, w := open()
	data := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{1}).Read(data) // incompressible: several chunks
	fc, err := w.PutFile(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	readAll := func(st *chunkstore.Store) ([]byte, error) {
		r, err := st.OpenFile(ctx, fc)
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		_, err = r.WriteTo(&b)
		return b.Bytes(), err
	}
	for _, tc := range []struct {
		name  string
		fault s3fault.Fault
	}{
		{"Reset", s3fault.Fault{Kind: s3fault.Reset, Count: 2}},
		{"ResetBody", s3fault.Fault{Kind: s3fault.ResetBody, After: 1000, Count: 1}},
		{"Truncate", s3fault.Fault{Kind: s3fault.Truncate, After: 1000, Count: 1}},
		{"Corrupt", s3fault.Fault{Kind: s3fault.Corrupt, After: 5000, Count: 1}},
		{"SlowDown", s3fault.Fault{Kind: s3fault.Error, Status: 503, Count: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, st := open() // an empty cache: every chunk is fetched
			tc.fault.Match = s3fault.Match{Method: "GET", KeyContains: "packs/"}
			proxy.Inject(tc.fault)
			defer proxy.Clear()
			got, err := readAll(st)
			if err != nil {
				t.Fatalf("read through one %s: %v", tc.name, err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read through one %s: wrong bytes", tc.name)
			}
			if proxy.Stats().Injected[tc.fault.Kind] == 0 {
				t.Fatalf("the fault was not hit")
			}
		})
	}
	t.Run("CorruptAlways", func(t *testing.T) {
		_, st := open()
		proxy.Inject(s3fault.Fault{Kind: s3fault.Corrupt, After: 5000, Match: s3fault.Match{Method: "GET", KeyContains: "packs/"}})
		defer proxy.Clear()
		if _, err := readAll(st); !errors.Is(err, chunkstore.ErrCorrupt) {
			t.Fatalf("read of a pack that always comes back corrupt: %v, want ErrCorrupt", err)
		}
	})
	t.Run("Down", func(t *testing.T) {
		_, st := open()
		proxy.SetDown(true)
		defer proxy.SetDown(false)
		c, cancel := context.WithTimeout(ctx, 2*time.Minute) // a bound for the test only
		defer cancel()
		r, err := st.OpenFile(c, fc)
		if err == nil {
			_, err = r.WriteTo(io.Discard)
		}
		if err == nil || c.Err() != nil {
			t.Fatalf("read with S3 down: %v (context: %v)", err, c.Err())
		}
		t.Logf("read with S3 down: %v", err)
	})
}
