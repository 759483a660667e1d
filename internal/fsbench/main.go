// Command fsbench measures file-system workloads side by side, in one run,
// on one fresh loop-mounted ext4 that holds every target's backing store:
// ext4 itself, libfuse's passthrough_hp (the fastest FUSE server there is:
// the floor) over /dev/fuse and over FUSE io_uring, cairn through its
// binary, and optionally go-fuse's loopback. Each workload runs -rounds
// times, the targets interleaved within each round; it prints medians, the
// FUSE requests each target's kernel connection got (per opcode, counted by
// package fusetrace) and the server's CPU time per request, and writes them
// as JSON with -json. `make fsbench` (part of `make bench`) runs it. Needs
// root and /dev/fuse.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/fusetrace"
	"github.com/cairnfs/cairn/internal/scratchfs"
)

var (
	cairnBin    = flag.String("cairn", "bin/cairn", "the cairn binary")
	phpBin      = flag.String("passthrough-hp", "", "libfuse's passthrough_hp (internal/fsbench/libfuse.sh builds it); empty: its targets are not available")
	targetsFlag = flag.String("targets", "ext4,passthrough_hp,passthrough_hp+uring,cairn,cairn+uring", "comma-separated targets, in table order; also: loopback (go-fuse's)")
	rounds      = flag.Int("rounds", 5, "interleaved rounds per workload (medians are reported)")
	only        = flag.String("only", "", "comma-separated workloads to run (default: all); snapshot: cairn's snapshot and history verbs (and latency); latency: only the longest request during a snapshot; memory: the daemon's peak RSS under load")
	workDir     = flag.String("dir", "/var/tmp", "where to make the scratch ext4 (or, with -scratch 0, the targets' directories)")
	scratch     = flag.Int64("scratch", 16<<30, "run on a fresh ext4 of this many bytes (a loop-mounted sparse image under -dir, made with mkfs.ext4's defaults); 0: on -dir's own filesystem")
	cacheDir    = flag.String("cache", defaultCacheDir(), "where set-up keeps the npm and Go module caches it fills once (outside the timed part)")
	goModPath   = flag.String("gomod", "go.mod", "the go.mod (go.sum next to it) of the go-mod-download workload")
	seqSize     = flag.Int64("seq", 1<<30, "bytes of the sequential read/write file")
	nFiles      = flag.Int("files", 10000, "files for create/stat/unlink")
	nSnap       = flag.Int("snapfiles", 100000, "files in the workspace of the snapshot benchmark")
	latencySize = flag.Int64("latency-bytes", 1<<30, "new data in the snapshot of the latency benchmark (the longest request during a snapshot)")
	latencyRuns = flag.Int("latency-runs", 1, "runs of the latency benchmark (each on new data)")
	memFiles    = flag.Int("mem-files", 100000, "small files the 8 writers of the memory benchmark create")
	memBytes    = flag.Int64("mem-bytes", 3<<30, "bytes of incompressible data the 8 writers of the memory benchmark write")
	jsonOut     = flag.String("json", "", "also write the results as JSON to this file")
	serveLB     = flag.Bool("serve-loopback", false, "internal: serve go-fuse's loopback of BACKING at MOUNTPOINT (the args) until unmounted")
)

func main() {
	flag.Parse()
	if *serveLB {
		if err := serveLoopback(flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "fsbench loopback:", err)
			os.Exit(1)
		}
		return
	}
	// On SIGINT or SIGTERM the context ends: commands are killed, and run
	// unwinds, unmounting everything it mounted.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fsbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) (err error) {
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: want 1 or more", *rounds)
	}
	defs, err := chooseTargets(*targetsFlag)
	if err != nil {
		return err
	}
	a := &assets{}
	all := workloads(a)
	wls, extra, err := chooseWorkloads(all, *only)
	if err != nil {
		return err
	}
	wants := func(name string) bool {
		return slices.ContainsFunc(wls, func(w workload) bool { return w.name == name })
	}
	if wants("npm-ci") {
		if a.npm, err = setupNPM(ctx, *cacheDir); err != nil {
			return err
		}
	}
	if wants("go-mod-download") {
		if a.gomod, err = setupGoMod(ctx, *cacheDir, *goModPath); err != nil {
			return err
		}
	}

	base, cleanup, err := scratchfs.WorkDir(*workDir, "cairn-bench-", *scratch)
	if err != nil {
		return err
	}
	defer cleanup()
	if a.goTar, a.goTarNoCmd, err = goTarballs(ctx, base); err != nil {
		return err
	}
	inputs := []string{a.goTar, a.goTarNoCmd}
	if a.npm.dir != "" {
		inputs = append(inputs, a.npm.cache())
	}
	if a.gomod.dir != "" {
		inputs = append(inputs, strings.TrimPrefix(a.gomod.proxyURL, "file://"))
	}
	if err := warm(inputs...); err != nil {
		return err
	}

	ctr, err := fusetrace.Open()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fsbench: FUSE requests are not counted: %v\n", err)
		ctr = nil
	} else {
		defer ctr.Close()
	}

	e := &env{cairnBin: *cairnBin, passthroughHP: *phpBin}
	if slices.ContainsFunc(defs, func(d targetDef) bool { return strings.HasSuffix(d.name, "+uring") }) {
		restore, na := enableURing()
		defer restore()
		e.uringNA = na
	}
	rep := &report{Date: time.Now().UTC(), Command: strings.Join(os.Args, " "), Kernel: kernel(), Rounds: *rounds}
	var ts []*target
	defer func() {
		for i := len(ts) - 1; i >= 0; i-- {
			if err := ts[i].stop(); err != nil {
				fmt.Fprintf(os.Stderr, "fsbench: stop %s: %v\n", ts[i].name, err)
			}
		}
	}()
	for _, d := range defs {
		t, err := d.start(ctx, e, base)
		if errors.Is(err, errNA) {
			fmt.Fprintf(os.Stderr, "fsbench: %s: %v\n", d.name, err)
			rep.Targets = append(rep.Targets, targetState{Name: d.name, NotAvailable: strings.TrimPrefix(err.Error(), errNA.Error()+": ")})
			continue
		}
		if err != nil {
			return fmt.Errorf("start %s: %w", d.name, err)
		}
		ts = append(ts, t)
		rep.Targets = append(rep.Targets, targetState{Name: d.name})
	}

	samples := map[[2]string][]sample{}
	for r := range *rounds {
		for _, w := range wls {
			for i := range ts {
				t := ts[(i+r)%len(ts)] // a different target first in each round
				if err := ctx.Err(); err != nil {
					return err
				}
				s, err := measure(ctx, w, t, ctr)
				if err != nil {
					return fmt.Errorf("%s on %s (round %d): %w", w.name, t.name, r+1, err)
				}
				samples[[2]string{w.name, t.name}] = append(samples[[2]string{w.name, t.name}], s)
				line := fmt.Sprintf("  round %d  %-16s %-21s %10.2f %s", r+1, w.name, t.name, s.value, w.unit)
				if n := s.reqs.Requests(); n > 0 {
					line += fmt.Sprintf("  %d requests, %.1f us CPU each", n, s.cpu.Seconds()*1e6/float64(n))
				}
				fmt.Fprintln(os.Stderr, line)
			}
		}
	}
	for _, w := range wls {
		for _, t := range ts {
			rep.Results = append(rep.Results, summarize(w.name, t.name, w.unit, samples[[2]string{w.name, t.name}], t.fuse))
		}
	}

	if i := slices.IndexFunc(ts, func(t *target) bool { return t.name == "cairn" }); len(extra) > 0 && i >= 0 {
		cli := cairnCLI(*cairnBin, filepath.Join(base, "cairn-home"))
		cairn := func(args ...string) (string, error) { return cli(ctx, args...) }
		if extra["snapshot"] {
			ms, err := snapshotBench(ts[i].dir, cairn)
			if err != nil {
				return err
			}
			rep.Cairn = append(rep.Cairn, result{Workload: "cairn snapshot 100k", Target: "cairn", Value: ms, Unit: "ms"})
			hs, err := historyBench(ts[i].dir, base, cairn)
			if err != nil {
				return err
			}
			rep.Cairn = append(rep.Cairn, hs...)
		}
		if extra["latency"] {
			var worst, took []float64
			for range *latencyRuns {
				w, t, err := snapshotLatency(ts[i].dir, *latencySize, cairn)
				if err != nil {
					return err
				}
				worst, took = append(worst, w), append(took, t)
			}
			rep.Cairn = append(rep.Cairn,
				result{Workload: fmt.Sprintf("longest request during a snapshot of %d MiB", *latencySize>>20), Target: "cairn", Value: median(worst), Unit: "ms"},
				result{Workload: fmt.Sprintf("cairn snapshot of %d MiB of new data", *latencySize>>20), Target: "cairn", Value: median(took), Unit: "ms"})
		}
		if extra["memory"] {
			write, snap, err := memoryLoad(ts[i].dir, ts[i].pid, *memFiles, *memBytes, cairn)
			if err != nil {
				return err
			}
			rep.Cairn = append(rep.Cairn,
				result{Workload: fmt.Sprintf("daemon peak RSS, 8 writers of %d files and %d MiB", *memFiles, *memBytes>>20), Target: "cairn", Value: write, Unit: "MiB"},
				result{Workload: "daemon peak RSS, snapshot of it with 8 writers", Target: "cairn", Value: snap, Unit: "MiB"})
		}
	}
	rep.print(os.Stdout)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// measure runs one workload on one target in a new directory, which it
// removes after; it syncs so that writeback does not land on the next
// measurement's clock (page caches are kept: "warm").
func measure(ctx context.Context, w workload, t *target, ctr *fusetrace.Counter) (sample, error) {
	dir := filepath.Join(t.dir, w.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sample{}, err
	}
	defer func() {
		os.RemoveAll(dir)
		syscall.Sync()
	}()
	m := &meter{t: t, ctr: ctr}
	v, err := w.run(ctx, dir, m)
	if err == nil {
		err = m.err
	}
	return sample{value: v, elapsed: m.elapsed, cpu: m.cpu, reqs: m.reqs}, err
}

func chooseTargets(list string) ([]targetDef, error) {
	var defs []targetDef
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		i := slices.IndexFunc(targetDefs, func(d targetDef) bool { return d.name == name })
		if i < 0 {
			var known []string
			for _, d := range targetDefs {
				known = append(known, d.name)
			}
			return nil, fmt.Errorf("-targets: no target %q (known: %s)", name, strings.Join(known, ", "))
		}
		defs = append(defs, targetDefs[i])
	}
	if len(defs) == 0 {
		return nil, errors.New("-targets: none")
	}
	return defs, nil
}

// chooseWorkloads returns the workloads -only names (all by default), and
// which of cairn's own benchmarks run (snapshot, latency, memory).
func chooseWorkloads(all []workload, only string) ([]workload, map[string]bool, error) {
	if strings.TrimSpace(only) == "" {
		return all, map[string]bool{"snapshot": true, "latency": true}, nil
	}
	var out []workload
	extra := map[string]bool{}
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case "snapshot":
			extra["snapshot"], extra["latency"] = true, true
			continue
		case "latency", "memory":
			extra[name] = true
			continue
		}
		i := slices.IndexFunc(all, func(w workload) bool { return w.name == name })
		if i < 0 {
			var known []string
			for _, w := range all {
				known = append(known, w.name)
			}
			return nil, nil, fmt.Errorf("-only: no workload %q (known: %s, snapshot, latency, memory)", name, strings.Join(known, ", "))
		}
		out = append(out, all[i])
	}
	return out, extra, nil
}

// serveLoopback serves go-fuse's loopback (passthrough on, go-fuse's
// defaults otherwise) of args[0] at args[1] until it is unmounted.
func serveLoopback(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("want BACKING MOUNTPOINT, got %q", args)
	}
	signal.Ignore(os.Interrupt) // the parent unmounts
	root, err := gofs.NewLoopbackRoot(args[0])
	if err != nil {
		return err
	}
	srv, err := gofs.Mount(args[1], root, &gofs.Options{MountOptions: fuse.MountOptions{
		AllowOther: true, DirectMount: true, MaxWrite: 1 << 20, Name: "loopback",
		Options: []string{"default_permissions"}}})
	if err != nil {
		return err
	}
	srv.Wait()
	return nil
}

func kernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
