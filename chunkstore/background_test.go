package chunkstore

import (
	"runtime"
	"testing"
)

// Background work runs on a thread of its own at a lower priority; the
// caller's thread keeps its priority, and a panic reaches the caller.
func TestRunBackground(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := threadNice()
	if err != nil {
		t.Fatal(err)
	}
	var inside int
	RunBackground(func() { inside, err = threadNice() })
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := threadNice(); after != before {
		t.Errorf("the caller's nice value went from %d to %d", before, after)
	}
	if runtime.GOOS == "linux" && inside != min(before+BackgroundNice, 19) {
		t.Errorf("background work ran at nice %d, want %d", inside, min(before+BackgroundNice, 19))
	}
	defer func() {
		if p := recover(); p != "boom" {
			t.Errorf("recovered %v, want the background work's panic", p)
		}
	}()
	RunBackground(func() { panic("boom") })
}

// The chunk workers are one per CPU at most, however many Go processors
// the process has (the daemon adds processors for its background threads).
func TestDefaultWorkers(t *testing.T) {
	old := runtime.GOMAXPROCS(runtime.NumCPU() + BackgroundThreads(runtime.NumCPU()))
	defer runtime.GOMAXPROCS(old)
	if got := DefaultWorkers(); got != runtime.NumCPU() {
		t.Errorf("DefaultWorkers() = %d with GOMAXPROCS %d, want one per CPU: %d", got, runtime.GOMAXPROCS(0), runtime.NumCPU())
	}
	runtime.GOMAXPROCS(1)
	if got := DefaultWorkers(); got != 1 {
		t.Errorf("DefaultWorkers() = %d with GOMAXPROCS 1, want 1", got)
	}
}
