package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// snapshotBench times `cairn snapshot` (the CLI, wall clock) of a workspace
// of nSnap files after a one-file change: the median of 5.
func snapshotBench(mnt string, cairn func(...string) (string, error)) (float64, error) {
	dir := filepath.Join(mnt, "snap")
	for i := range *nSnap {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return 0, err
			}
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			return 0, err
		}
	}
	if _, err := cairn("snapshot", "bench"); err != nil {
		return 0, err
	}
	var ms []float64
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(dir, "d050", "f50000"), []byte(fmt.Sprintf("change %d\n", i)), 0o644); err != nil {
			return 0, err
		}
		start := time.Now()
		if _, err := cairn("snapshot", "bench"); err != nil {
			return 0, err
		}
		ms = append(ms, float64(time.Since(start).Microseconds())/1000)
	}
	slices.Sort(ms)
	fmt.Fprintf(os.Stderr, "  cairn snapshot of %d files after a one-file change: %v ms\n", *nSnap, ms)
	return ms[len(ms)/2], nil
}

// historyBench times the history verbs through the CLI (wall clock, the
// median of 5, process start included) on the 100k-file workspace that
// snapshotBench left: fork of it and of a 100-file workspace, rollback of
// it while mounted, and diff of two of its snapshots that differ in 10
// files.
func historyBench(mnt, base string, cairn func(...string) (string, error)) ([]result, error) {
	median := func(what string, prepare func(i int) error, args func(i int) []string) (float64, error) {
		var ms []float64
		for i := range 5 {
			if prepare != nil {
				if err := prepare(i); err != nil {
					return 0, err
				}
			}
			start := time.Now()
			if _, err := cairn(args(i)...); err != nil {
				return 0, err
			}
			ms = append(ms, float64(time.Since(start).Microseconds())/1000)
		}
		slices.Sort(ms)
		fmt.Fprintf(os.Stderr, "  %s: %v ms\n", what, ms)
		return ms[len(ms)/2], nil
	}
	var out []result
	add := func(name string, v float64, err error) error {
		out = append(out, result{Workload: name, Target: "cairn", Value: v, Unit: "ms"})
		return err
	}
	// A 100-file workspace, imported.
	small := filepath.Join(base, "small")
	for i := range 100 {
		os.MkdirAll(small, 0o755)
		if err := os.WriteFile(filepath.Join(small, fmt.Sprintf("f%d", i)), []byte("small\n"), 0o644); err != nil {
			return nil, err
		}
	}
	if _, err := cairn("import", "small", small); err != nil {
		return nil, err
	}
	v, err := median("cairn fork, 100 files", nil, func(i int) []string { return []string{"fork", "small", fmt.Sprintf("small-%d", i)} })
	if err := add("cairn fork 100 files", v, err); err != nil {
		return nil, err
	}
	v, err = median("cairn fork, 100k files", nil, func(i int) []string { return []string{"fork", "bench", fmt.Sprintf("bench-%d", i)} })
	if err := add("cairn fork 100k files", v, err); err != nil {
		return nil, err
	}
	// Diff: two snapshots 10 files apart.
	dir := filepath.Join(mnt, "snap")
	a, err := cairn("snapshot", "bench", "-m", "before ten changes")
	if err != nil {
		return nil, err
	}
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("d%03d", i*9), fmt.Sprintf("f%d", i*9000+i)), []byte("diff\n"), 0o644); err != nil {
			return nil, err
		}
	}
	b, err := cairn("snapshot", "bench", "-m", "ten changes")
	if err != nil {
		return nil, err
	}
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	v, err = median("cairn diff --stat, 100k files, 10 changed", nil, func(int) []string { return []string{"diff", "--stat", a, b} })
	if err := add("cairn diff 100k, 10 changed", v, err); err != nil {
		return nil, err
	}
	// Rollback of the mounted workspace, after a one-file change.
	v, err = median("cairn rollback, 100k files, mounted", func(i int) error {
		return os.WriteFile(filepath.Join(dir, "d050", "f50000"), []byte(fmt.Sprintf("rollback %d\n", i)), 0o644)
	}, func(int) []string { return []string{"rollback", "bench", b} })
	if err := add("cairn rollback 100k mounted", v, err); err != nil {
		return nil, err
	}
	if got, err := os.ReadFile(filepath.Join(dir, "d050", "f50000")); err != nil || strings.HasPrefix(string(got), "rollback") {
		return nil, fmt.Errorf("after the rollback the mount reads %q, %v", got, err)
	}
	return out, nil
}

// snapshotLatency writes size bytes of new, incompressible data into the
// mount (8 files), then takes `cairn snapshot` while a probe creates,
// stats and lists files in the mount in a loop, and returns the longest
// probe (one create + stat + readdir of a small directory) and the
// snapshot's wall time, in ms: how long the mount stalls while a snapshot
// reads, chunks and packs (issue 16's goal: 50 ms for 1 GiB).
var latencySeed uint64

func snapshotLatency(mnt string, size int64, cairn func(...string) (string, error)) (longest, snap float64, err error) {
	dir := filepath.Join(mnt, "latency")
	probeDir := filepath.Join(dir, "probe")
	if err := os.MkdirAll(probeDir, 0o755); err != nil {
		return 0, 0, err
	}
	if _, err := cairn("snapshot", "bench"); err != nil {
		return 0, 0, err
	}
	latencySeed++ // new data in every run: none of it dedupes
	rnd := rand.New(rand.NewPCG(latencySeed, 2))
	buf := make([]byte, 1<<20)
	for f := range 8 {
		w, err := os.Create(filepath.Join(dir, fmt.Sprintf("big%d", f)))
		if err != nil {
			return 0, 0, err
		}
		for n := int64(0); n < size/8; n += int64(len(buf)) {
			for i := 0; i < len(buf); i += 8 {
				binary.LittleEndian.PutUint64(buf[i:], rnd.Uint64())
			}
			if _, err := w.Write(buf); err != nil {
				w.Close()
				return 0, 0, err
			}
		}
		if err := w.Close(); err != nil {
			return 0, 0, err
		}
	}
	syscall.Sync()
	stop := make(chan struct{})
	type probe struct{ at, took, open, write, stat, list time.Duration }
	probed := make(chan []probe)
	start := time.Now()
	go func() {
		var all []probe
		for i := 0; ; i++ {
			select {
			case <-stop:
				probed <- all
				return
			default:
			}
			t0 := time.Now()
			p := filepath.Join(probeDir, fmt.Sprintf("p%d", i%64))
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			tOpen := time.Now()
			if err == nil {
				f.Write([]byte("x"))
				f.Close()
			}
			t1 := time.Now()
			os.Stat(p)
			t2 := time.Now()
			os.ReadDir(probeDir)
			t3 := time.Now()
			all = append(all, probe{t0.Sub(start), t3.Sub(t0), tOpen.Sub(t0), t1.Sub(tOpen), t2.Sub(t1), t3.Sub(t2)})
		}
	}()
	_, err = cairn("snapshot", "bench")
	took := time.Since(start)
	close(stop)
	all := <-probed
	if err != nil {
		return 0, 0, err
	}
	// The slowest probes and when they started (from the snapshot's
	// start): where in the snapshot the mount stalled.
	slices.SortFunc(all, func(a, b probe) int { return int(b.took - a.took) })
	var worst time.Duration
	var slow []string
	for i, p := range all {
		if i == 0 {
			worst = p.took
		}
		if i < 5 {
			slow = append(slow, fmt.Sprintf("%v at %v (open %v, write+close %v, stat %v, list %v)", p.took.Round(100*time.Microsecond), p.at.Round(time.Millisecond),
				p.open.Round(100*time.Microsecond), p.write.Round(100*time.Microsecond), p.stat.Round(100*time.Microsecond), p.list.Round(100*time.Microsecond)))
		}
	}
	p99 := time.Duration(0)
	if n := len(all); n > 0 {
		p99 = all[n/100].took
	}
	fmt.Fprintf(os.Stderr, "  cairn snapshot of %d MiB of new data: %v; %d probes meanwhile, 99th percentile %v, longest %s\n",
		size>>20, took.Round(time.Millisecond), len(all), p99.Round(100*time.Microsecond), strings.Join(slow, ", "))
	return float64(worst.Microseconds()) / 1000, float64(took.Microseconds()) / 1000, os.RemoveAll(dir)
}
