package cgroupbpf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// pinDead pins programs attached to cgroup in a new directory of a fresh
// bpffs from a child process that then exits without cleaning up, as a
// killed supervisor does, and returns that directory. The pins are removed
// at the end of the test.
func pinDead(t *testing.T, cgroup string) string {
	t.Helper()
	pins := filepath.Join(bpffs(t), "sandbox")
	t.Cleanup(func() {
		if err := RemovePinned(pins); err != nil {
			t.Error(err)
		}
	})
	spec, _ := json.Marshal(loaderSpec{Cgroup: cgroup, PinDir: pins})
	out, err := runInCgroup(t, mustOwnCgroup(t), false, loaderEnv+"="+string(spec))
	if err != nil || strings.TrimSpace(string(out)) != "pinned" {
		t.Fatalf("loader: %q, %v", out, err)
	}
	if n := attachedPrograms(t, cgroup); n != len(programSpecs) {
		t.Fatalf("%d programs attached after the loader exited, want %d", n, len(programSpecs))
	}
	return pins
}

// holdEnv makes the test binary a holder: a process that stays until the
// FIFO named by the variable's value, which it opens for reading, has no
// writer any more.
const holdEnv = "CAIRN_CGROUPBPF_HOLD"

func runHolder(fifo string) int {
	if _, err := os.ReadFile(fifo); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// hold starts a holder in cgroup and returns once it is there; release
// ends it and waits until the kernel no longer counts it in cgroup.events
// (a reaped task can leave its cgroup a little later). release is called
// at the end of the test too.
func hold(t *testing.T, cgroup string) (release func()) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "hold")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		err := errors.New("the holder did not start")
		defer func() {
			exited <- err
			// Unblock the open below if the holder never opened the FIFO.
			if f, ferr := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0); ferr == nil {
				f.Close()
			}
		}()
		_, err = runInCgroup(t, cgroup, false, holdEnv+"="+fifo)
	}()
	// Opening for writing waits for a reader: the holder, started in
	// cgroup (CLONE_INTO_CGROUP), or the goroutine once it has failed.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		w.Close()
		t.Fatalf("holder: %v", err)
	default:
	}
	done := false
	release = func() {
		t.Helper()
		if done {
			return
		}
		done = true
		w.Close()
		if err := <-exited; err != nil {
			t.Errorf("holder: %v", err)
		}
		for stop := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			populated, err := cgroupPopulated(cgroup)
			if err != nil {
				t.Fatal(err)
			}
			if !populated {
				return
			}
			if time.Now().After(stop) {
				t.Fatalf("%s still populated a minute after its only process exited", cgroup)
			}
		}
	}
	t.Cleanup(release)
	return release
}

// TestRemoveDead: the pins of a dead supervisor stay, programs attached,
// while their cgroup or one below it has a process; once it has none they
// are removed, the programs detached, and the cgroup reported (not
// removed).
func TestRemoveDead(t *testing.T) {
	needBPF(t)
	cg := newCgroup(t, "")
	sub := newCgroup(t, cg)
	pins := pinDead(t, cg)

	for _, where := range []string{cg, sub} {
		release := hold(t, where)
		if populated, err := cgroupPopulated(cg); err != nil || !populated {
			t.Fatalf("%s with a process below: populated %v, %v", cg, populated, err)
		}
		cgs, err := RemoveDead(pins)
		if !errors.Is(err, ErrInUse) || cgs != nil {
			t.Fatalf("RemoveDead with a process in %s: %q, %v; want ErrInUse", where, cgs, err)
		}
		if !strings.Contains(err.Error(), cg) {
			t.Errorf("the error does not name the cgroup %s: %v", cg, err)
		}
		for _, n := range pinNames() {
			if _, err := os.Stat(filepath.Join(pins, n)); err != nil {
				t.Errorf("pin %s after the refusal: %v", n, err)
			}
		}
		if n := attachedPrograms(t, cg); n != len(programSpecs) {
			t.Errorf("%d programs attached after the refusal, want %d", n, len(programSpecs))
		}
		release()
	}

	cgs, err := RemoveDead(pins)
	if err != nil {
		t.Fatal(err)
	}
	if len(cgs) != 1 || cgs[0] != cg {
		t.Errorf("RemoveDead reported cgroups %q, want [%s]", cgs, cg)
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory after RemoveDead: %v", err)
	}
	if n := attachedPrograms(t, cg); n != 0 {
		t.Errorf("%d programs attached after RemoveDead", n)
	}
	if _, err := os.Stat(cg); err != nil {
		t.Errorf("the cgroup after RemoveDead (the caller removes it): %v", err)
	}

	if cgs, err := RemoveDead(pins); err != nil || cgs != nil {
		t.Errorf("RemoveDead on a directory that is gone: %q, %v", cgs, err)
	}
}

// TestRemoveDead_CgroupGone: pins whose cgroup was removed meanwhile tie
// no cgroup; they are removed.
func TestRemoveDead_CgroupGone(t *testing.T) {
	needBPF(t)
	cg := newCgroup(t, "")
	pins := pinDead(t, cg)
	if err := unix.Rmdir(cg); err != nil {
		t.Fatal(err)
	}
	cgs, err := RemoveDead(pins)
	if err != nil || len(cgs) != 0 {
		t.Fatalf("RemoveDead: %q, %v; want no cgroup and no error", cgs, err)
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory after RemoveDead: %v", err)
	}
}

// TestRemoveDead_UnknownPin: a pin that is neither a link nor a map could
// tie a cgroup that cannot be known: RemoveDead removes nothing.
func TestRemoveDead_UnknownPin(t *testing.T) {
	needBPF(t)
	cg := newCgroup(t, "")
	pins := pinDead(t, cg)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SocketFilter,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      license,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	stray := filepath.Join(pins, "stray")
	if err := prog.Pin(stray); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(stray) }) // before RemovePinned, which leaves a directory it cannot empty

	if cgs, err := RemoveDead(pins); err == nil || cgs != nil || errors.Is(err, ErrInUse) {
		t.Fatalf("RemoveDead with a program pin: %q, %v; want an error", cgs, err)
	}
	if n := attachedPrograms(t, cg); n != len(programSpecs) {
		t.Errorf("%d programs attached after the refusal, want %d", n, len(programSpecs))
	}
}
