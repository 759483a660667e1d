package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cairnfs/cairn/journal"
)

// progressDelay is how long a journal operation runs before its progress
// line appears: quick snapshots print nothing extra.
const progressDelay = 300 * time.Millisecond

// watchProgress shows the progress of a journal operation (a snapshot or a
// restore, in the daemon or in this process) on a terminal line, polling
// it, until stop is called; stop erases the line. With on false it does
// nothing.
func watchProgress(w io.Writer, on bool, poll func(context.Context) (journal.Progress, error)) (stop func()) {
	if !on {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		shown := false
		defer func() {
			if shown {
				fmt.Fprint(w, "\r\x1b[K")
			}
		}()
		t := time.NewTimer(progressDelay)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if p, err := poll(ctx); err == nil && p.Busy {
				fmt.Fprintf(w, "\r\x1b[K%s: %d files, %s", p.Op, p.Files, bytesString(p.Bytes))
				shown = true
			}
			t.Reset(100 * time.Millisecond)
		}
	}()
	return func() { cancel(); wg.Wait() }
}
