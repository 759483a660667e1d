//go:build linux

package model

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/journal"
)

// TestLinuxFileData checks the model's data operations (write, truncate,
// every fallocate mode including ZERO_RANGE, which tmpfs lacks,
// copy_file_range, read) against the filesystem under t.TempDir(), as
// root's file-descriptor operations on two files. Only contents, sizes
// and error classes are compared.
func TestLinuxFileData(t *testing.T) {
	dir := t.TempDir()
	fds := make([]int, 2)
	for i := range fds {
		fd, err := unix.Open(filepath.Join(dir, fmt.Sprint(i)), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		fds[i] = fd
	}
	if err := unix.Fallocate(fds[0], uint32(journal.FallocZeroRange), 0, 1); errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("the filesystem of %s has no FALLOC_FL_ZERO_RANGE (run with TMPDIR on ext4 or xfs)", dir)
	} else if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fds[0], 0); err != nil {
		t.Fatal(err)
	}

	ctx := t.Context()
	seed := rand.Uint64()
	if *linuxSeed != 0 {
		seed = *linuxSeed
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	m := New(func() int64 { return 0 }, 2)
	inos := make([]journal.Ino, 2)
	for i := range inos {
		a, err := m.Create(ctx, journal.Root, journal.RootIno, fmt.Sprint(i), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		inos[i] = a.Ino
	}
	off := func(i int) int64 {
		size, _ := m.GetAttr(ctx, inos[i])
		return pick2(rng, 0, int64(size.Size), int64(size.Size)+rng.Int64N(20000), rng.Int64N(70000), 4096*rng.Int64N(16))
	}
	ops := 3 * *linuxOps
	for step := range ops {
		i, j := rng.IntN(2), rng.IntN(2)
		var desc string
		var merr, kerr error
		switch rng.IntN(5) {
		case 0:
			p := make([]byte, rng.IntN(10000))
			for k := range p {
				p[k] = byte(1 + rng.IntN(255))
			}
			o := off(i)
			desc = fmt.Sprintf("write %d at %d, %d bytes", i, o, len(p))
			_, merr = m.Write(ctx, journal.Root, inos[i], p, o)
			_, kerr = unix.Pwrite(fds[i], p, o)
		case 1:
			size := off(i)
			desc = fmt.Sprintf("truncate %d to %d", i, size)
			_, merr = m.SetAttr(ctx, journal.Root, inos[i], journal.SetAttrIn{Valid: journal.SetSize, Size: uint64(size)})
			kerr = unix.Ftruncate(fds[i], size)
		case 2, 3:
			mode := pick2(rng, journal.FallocMode(0), journal.FallocKeepSize, journal.FallocPunchHole|journal.FallocKeepSize,
				journal.FallocZeroRange, journal.FallocZeroRange|journal.FallocKeepSize)
			o, n := off(i), 1+rng.Int64N(30000)
			desc = fmt.Sprintf("fallocate %d mode %#x [%d, +%d)", i, mode, o, n)
			merr = m.Fallocate(ctx, journal.Root, inos[i], mode, o, n)
			kerr = unix.Fallocate(fds[i], uint32(mode), o, n)
		case 4:
			io, oo, n := off(i), off(j), rng.Int64N(20000)
			desc = fmt.Sprintf("copy_file_range %d@%d -> %d@%d, %d bytes", i, io, j, oo, n)
			var mn int64
			mn, merr = m.CopyFileRange(ctx, journal.Root, inos[i], io, inos[j], oo, n)
			kn, err := unix.CopyFileRange(fds[i], &io, fds[j], &oo, int(n), 0)
			kerr = err
			if merr == nil && err == nil && mn != int64(kn) {
				t.Fatalf("seed %d step %d: %s: model copied %d bytes, Linux %d", seed, step, desc, mn, kn)
			}
		}
		if mc, kc := modelClass(merr), kernelClass(kerr); mc != kc {
			t.Fatalf("seed %d step %d: %s: model %q (%v), Linux %q", seed, step, desc, mc, merr, kc)
		}
		for k := range fds {
			a, _ := m.GetAttr(ctx, inos[k])
			got := make([]byte, a.Size)
			if _, err := m.Read(ctx, inos[k], got, 0); err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(k)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("seed %d step %d: after %s: file %d: model %d bytes, Linux %d bytes, first difference at %d",
					seed, step, desc, k, len(got), len(want), firstDiff(got, want))
			}
		}
	}
	t.Logf("seed %d: %d data operations agree with the filesystem under %s", seed, ops, dir)
}

func pick2[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }
