package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// procHWM returns process pid's peak resident set size (VmHWM) in bytes.
func procHWM(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseHWM(b)
}

// parseHWM finds VmHWM in the text of /proc/PID/status.
func parseHWM(status []byte) (uint64, error) { return parseStatusKB(status, "VmHWM:") }

// parseStatusKB finds field (with its colon) in the text of
// /proc/PID/status and returns its value in bytes.
func parseStatusKB(status []byte, field string) (uint64, error) {
	for _, line := range strings.Split(string(status), "\n") {
		rest, ok := strings.CutPrefix(line, field)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s unexpected %q", field, line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s %w", field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s in the status", field)
}

// rssSampler samples process pid's anonymous and file-backed resident
// memory (RssAnon, RssFile) every 50 ms until stopped, and keeps the
// peak of each: which kind the peak RSS is.
type rssSampler struct {
	stop      chan struct{}
	done      chan struct{}
	anon, fil uint64
}

func sampleRSS(pid int) *rssSampler {
	r := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
				if v, err := parseStatusKB(b, "RssAnon:"); err == nil {
					r.anon = max(r.anon, v)
				}
				if v, err := parseStatusKB(b, "RssFile:"); err == nil {
					r.fil = max(r.fil, v)
				}
			}
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
		}
	}()
	return r
}

// end stops the sampler and describes the peaks.
func (r *rssSampler) end() string {
	close(r.stop)
	<-r.done
	return fmt.Sprintf("anonymous %d MiB, file-backed %d MiB", r.anon>>20, r.fil>>20)
}

// resetHWM sets process pid's peak RSS back to its current RSS (proc(5),
// clear_refs: 5), so that the next procHWM is the peak of what follows.
func resetHWM(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// fillRandom fills buf with incompressible bytes.
func fillRandom(rnd *rand.Rand, buf []byte) {
	for i := 0; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], rnd.Uint64())
	}
}

// memoryLoad measures the daemon's peak RSS (VmHWM) under load (issue 16:
// <= 150 MiB for a 100k-file workspace under load): 8 writers each create
// nFiles/8 small files and bigBytes/8 of incompressible data in big files,
// then `cairn snapshot` commits it all while the 8 writers keep rewriting
// small files. It returns the peak of each phase, in MiB.
func memoryLoad(mnt string, pid int, nFiles int, bigBytes int64, cairn func(...string) (string, error)) (write, snap float64, err error) {
	dir := filepath.Join(mnt, "memload")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	if err := resetHWM(pid); err != nil {
		return 0, 0, err
	}
	const writers = 8
	errs := make([]error, writers)
	sampler := sampleRSS(pid)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = loadWriter(filepath.Join(dir, fmt.Sprintf("w%d", w)), uint64(w), nFiles/writers, bigBytes/writers)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	wrote := time.Since(start)
	hwm, err := procHWM(pid)
	if err != nil {
		return 0, 0, err
	}
	write = float64(hwm) / (1 << 20)
	writePeaks := sampler.end()
	syscall.Sync()
	if err := resetHWM(pid); err != nil {
		return 0, 0, err
	}
	// The snapshot, with the writers rewriting small files meanwhile.
	var stop atomic.Bool
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := filepath.Join(dir, fmt.Sprintf("w%d", w), "small")
			for i := 0; !stop.Load(); i++ {
				p := filepath.Join(d, fmt.Sprintf("f%d", i%(nFiles/writers)))
				if err := os.WriteFile(p, bytes.Repeat([]byte{byte(i)}, 1+i%4096), 0o644); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		}()
	}
	start = time.Now()
	sampler = sampleRSS(pid)
	_, err = cairn("snapshot", "bench")
	took := time.Since(start)
	stop.Store(true)
	wg.Wait()
	snapPeaks := sampler.end()
	if err != nil {
		return 0, 0, err
	}
	for _, err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	if hwm, err = procHWM(pid); err != nil {
		return 0, 0, err
	}
	snap = float64(hwm) / (1 << 20)
	fmt.Fprintf(os.Stderr, "  8 writers, %d files and %d MiB: %v, daemon peak RSS %.0f MiB (sampled peaks: %s)\n  snapshot with the writers rewriting: %v, peak RSS %.0f MiB (%s)\n",
		nFiles, bigBytes>>20, wrote.Round(time.Millisecond), write, writePeaks, took.Round(time.Millisecond), snap, snapPeaks)
	return write, snap, os.RemoveAll(dir)
}

// loadWriter writes n small files (1 byte to 4 KiB) and big bytes of
// incompressible data in files of up to 64 MiB under dir.
func loadWriter(dir string, seed uint64, n int, big int64) error {
	small := filepath.Join(dir, "small")
	if err := os.MkdirAll(small, 0o755); err != nil {
		return err
	}
	rnd := rand.New(rand.NewPCG(seed, 7))
	buf := make([]byte, 1<<20)
	for i := range n {
		fillRandom(rnd, buf[:4096])
		if err := os.WriteFile(filepath.Join(small, fmt.Sprintf("f%d", i)), buf[:1+i%4096], 0o644); err != nil {
			return err
		}
	}
	for f := 0; big > 0; f++ {
		w, err := os.Create(filepath.Join(dir, fmt.Sprintf("big%d", f)))
		if err != nil {
			return err
		}
		for n := int64(0); n < 64<<20 && big > 0; n += int64(len(buf)) {
			fillRandom(rnd, buf)
			if _, err := w.Write(buf); err != nil {
				w.Close()
				return err
			}
			big -= int64(len(buf))
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	return nil
}
