package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/journal"
)

// syncBuffer is a bytes.Buffer safe for the watcher's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestWatchProgress(t *testing.T) {
	for _, busy := range []bool{true, false} {
		var out syncBuffer
		polls := make(chan struct{}, 16)
		stop := watchProgress(&out, true, func(context.Context) (journal.Progress, error) {
			polls <- struct{}{}
			return journal.Progress{Op: "snapshot", Busy: busy, Files: 3, Bytes: 5 << 20}, nil
		})
		<-polls
		<-polls // the first poll's line is written by now
		stop()
		got := out.String()
		if busy && (!strings.Contains(got, "snapshot: 3 files, 5.0 MiB") || !strings.HasSuffix(got, "\r\x1b[K")) {
			t.Errorf("busy: output %q, want the progress line, then erased", got)
		}
		if !busy && got != "" {
			t.Errorf("idle: output %q, want none", got)
		}
	}
	// Off: nothing, and stop returns at once.
	var out syncBuffer
	watchProgress(&out, false, func(context.Context) (journal.Progress, error) {
		t.Error("polled while off")
		return journal.Progress{}, nil
	})()
}
