// Command runbench measures `cairn run` end to end with the workspace's
// daemon already up: a turn of `true` with its turn-end snapshot, the same
// without the snapshot, and plain `true` started by this process, side by
// side (medians of -n runs). make bench runs it; the sandbox's own start
// (to the command's exec) is BenchmarkStart in package sandbox.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

var (
	cairnBin = flag.String("cairn", "bin/cairn", "the cairn binary")
	runs     = flag.Int("n", 30, "runs of each")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "runbench:", err)
		os.Exit(1)
	}
}

func run() error {
	home, err := os.MkdirTemp("/var/tmp", "cairn-runbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	cairn := func(args ...string) error {
		cmd := exec.Command(*cairnBin, args...)
		cmd.Env = append(os.Environ(), "CAIRN_HOME="+home, "CAIRN_STORE="+filepath.Join(home, "store"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("cairn %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := cairn("init"); err != nil {
		return err
	}
	mnt := filepath.Join(home, "mnt")
	os.MkdirAll(mnt, 0o755)
	if err := cairn("mount", "ws", mnt); err != nil {
		return err
	}
	defer cairn("unmount", "ws")
	median := func(fn func() error) (time.Duration, error) {
		var ds []time.Duration
		for range *runs {
			start := time.Now()
			if err := fn(); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	base, err := median(func() error { return exec.Command("true").Run() })
	if err != nil {
		return err
	}
	noSnap, err := median(func() error { return cairn("run", "ws", "--no-snapshot", "--", "true") })
	if err != nil {
		return err
	}
	full, err := median(func() error { return cairn("run", "ws", "--", "true") })
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cairn run, daemon up (median of %d)\tresult\ttarget\n", *runs)
	fmt.Fprintf(tw, "true, started directly\t%s\t\n", ms(base))
	fmt.Fprintf(tw, "cairn run ws --no-snapshot -- true (CLI start, sandbox, exit)\t%s\t\n", ms(noSnap))
	fmt.Fprintf(tw, "cairn run ws -- true (with the turn-end snapshot)\t%s\t<= 300 ms\n", ms(full))
	return tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
