package fuseuring

import (
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// The ring round-trips NOPs, more than it has SQEs, in batches that fill
// it, with each completion's user data and result.
func TestURing_Nop(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, flags := range []uint32{0, setupSingleIssuer | setupDeferTaskrun} {
		r, err := newURing(4, flags)
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			t.Skipf("io_uring is not available here: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		seen := map[uint64]bool{}
		next := uint64(0)
		for next < 50 {
			for {
				s := r.next()
				if s == nil {
					break
				}
				s.Opcode = opNop
				s.UserData = next
				next++
			}
			if err := r.enter(1); err != nil {
				t.Fatal(err)
			}
			for r.ready() < 4 {
				if err := r.enter(1); err != nil {
					t.Fatal(err)
				}
			}
			r.reap(func(c cqe) {
				if c.Res != 0 {
					t.Errorf("NOP %d: res %d", c.UserData, c.Res)
				}
				if seen[c.UserData] {
					t.Errorf("NOP %d completed twice", c.UserData)
				}
				seen[c.UserData] = true
			})
		}
		if len(seen) != int(next) {
			t.Errorf("flags %#x: %d completions of %d NOPs", flags, len(seen), next)
		}
		r.close()
	}
}

func TestPossibleCPUs(t *testing.T) {
	n, err := possibleCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if n < runtime.NumCPU() {
		t.Errorf("%d possible CPUs, fewer than the %d usable", n, runtime.NumCPU())
	}
}
