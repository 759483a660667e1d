// Command fsbench measures file-system workloads side by side on ext4 (the
// disk under the state directory), on a plain go-fuse loopback over the
// same disk (passthrough on, go-fuse's defaults otherwise), and on a cairn
// mount made by the binary, and prints a table of ratios to ext4 (and JSON
// with -json). `make bench` runs it. Needs root and /dev/fuse.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/cairnfs/cairn/internal/scratchfs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var (
	cairnBin = flag.String("cairn", "bin/cairn", "the cairn binary")
	workDir  = flag.String("dir", "/var/tmp", "where to make the ext4 directory, the loopback's backing directory and cairn's state (one disk)")
	scratch  = flag.Int64("scratch", 16<<30, "run on a fresh ext4 of this many bytes (a loop-mounted sparse image under -dir, made with mkfs.ext4's defaults); 0: on -dir's own filesystem")
	seqSize  = flag.Int64("seq", 1<<30, "bytes of the sequential read/write file")
	nFiles   = flag.Int("files", 10000, "files for create/stat/unlink")
	nSnap    = flag.Int("snapfiles", 100000, "files in the workspace of the snapshot benchmark")
	jsonOut  = flag.String("json", "", "also write the results as JSON to this file")
	only     = flag.String("only", "", "comma-separated workloads to run (default: all)")
)

// result is one workload on one target.
type result struct {
	Workload string  `json:"workload"`
	Target   string  `json:"target"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"` // "MB/s", "ops/s" (higher is better) or "s", "ms" (lower is better)
}

type target struct {
	name string
	dir  string
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fsbench:", err)
		os.Exit(1)
	}
}

func run() error {
	base, cleanup, err := scratchfs.WorkDir(*workDir, "cairn-bench-", *scratch)
	if err != nil {
		return err
	}
	defer cleanup()
	ext4 := filepath.Join(base, "ext4")
	os.MkdirAll(ext4, 0o755)

	// The plain go-fuse loopback.
	backing, lmnt := filepath.Join(base, "loop-backing"), filepath.Join(base, "loop-mnt")
	os.MkdirAll(backing, 0o755)
	os.MkdirAll(lmnt, 0o755)
	root, err := gofs.NewLoopbackRoot(backing)
	if err != nil {
		return err
	}
	srv, err := gofs.Mount(lmnt, root, &gofs.Options{MountOptions: fuse.MountOptions{
		AllowOther: true, DirectMount: true, MaxWrite: 1 << 20, Name: "loopback",
		Options: []string{"default_permissions"}}})
	if err != nil {
		return fmt.Errorf("loopback mount: %w", err)
	}
	defer func() { srv.Unmount(); srv.Wait() }()

	// cairn, through the binary.
	home, cmnt := filepath.Join(base, "home"), filepath.Join(base, "cairn-mnt")
	os.MkdirAll(cmnt, 0o755)
	cairn := func(args ...string) (string, error) {
		cmd := exec.Command(*cairnBin, args...)
		cmd.Env = append(os.Environ(), "CAIRN_HOME="+home)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("cairn %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	if _, err := cairn("init"); err != nil {
		return err
	}
	if _, err := cairn("mount", "bench", cmnt); err != nil {
		return err
	}
	defer cairn("unmount", "bench")

	targets := []target{{"ext4", ext4}, {"loopback", lmnt}, {"cairn", cmnt}}
	tarball := filepath.Join(base, "gosrc.tar")
	if err := exec.Command("tar", "-C", goroot(), "-cf", tarball, "src").Run(); err != nil {
		return fmt.Errorf("tar of the Go tree: %w", err)
	}
	want := map[string]bool{}
	for _, w := range strings.Split(*only, ",") {
		if w != "" {
			want[w] = true
		}
	}
	var results []result
	for _, w := range workloads(tarball) {
		if len(want) > 0 && !want[w.name] {
			continue
		}
		for _, t := range targets {
			dir := filepath.Join(t.dir, w.name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			v, err := w.run(dir)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", w.name, t.name, err)
			}
			results = append(results, result{w.name, t.name, v, w.unit})
			fmt.Fprintf(os.Stderr, "  %-22s %-9s %10.1f %s\n", w.name, t.name, v, w.unit)
			os.RemoveAll(dir)
			dropCaches()
		}
	}
	if len(want) == 0 || want["snapshot"] {
		ms, err := snapshotBench(cmnt, cairn)
		if err != nil {
			return err
		}
		results = append(results, result{"cairn snapshot 100k", "cairn", ms, "ms"})
		hs, err := historyBench(cmnt, base, cairn)
		if err != nil {
			return err
		}
		results = append(results, hs...)
	}
	printTable(results)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		return os.WriteFile(*jsonOut, b, 0o644)
	}
	return nil
}

// dropCaches syncs between measurements so one target's writeback does not
// land on the next one's clock. (Page caches are kept: "warm".)
func dropCaches() { syscall.Sync() }

type workload struct {
	name string
	unit string
	run  func(dir string) (float64, error)
}

func workloads(tarball string) []workload {
	return []workload{
		{"seq-write", "MB/s", func(dir string) (float64, error) { return seqWrite(filepath.Join(dir, "big")) }},
		{"seq-read", "MB/s", func(dir string) (float64, error) {
			p := filepath.Join(dir, "big")
			if _, err := seqWrite(p); err != nil {
				return 0, err
			}
			readAll(p) // warm
			return seqRead(p)
		}},
		{"rand-write-4k", "ops/s", func(dir string) (float64, error) { return randIO(filepath.Join(dir, "r"), true) }},
		{"rand-read-4k", "ops/s", func(dir string) (float64, error) { return randIO(filepath.Join(dir, "r"), false) }},
		{"create", "ops/s", func(dir string) (float64, error) { return files(dir, "create") }},
		{"stat", "ops/s", func(dir string) (float64, error) { return files(dir, "stat") }},
		{"unlink", "ops/s", func(dir string) (float64, error) { return files(dir, "unlink") }},
		// statfs always goes to the FUSE server: the floor of every
		// operation the kernel cannot answer from its caches.
		{"statfs (round trip)", "ops/s", func(dir string) (float64, error) { return statfs(dir) }},
		{"tar-x-go-tree", "s", func(dir string) (float64, error) { return timed(dir, "tar", "-xf", tarball) }},
		{"git-add-commit", "s", func(dir string) (float64, error) {
			if err := exec.Command("tar", "-C", dir, "-xf", tarball).Run(); err != nil {
				return 0, err
			}
			if _, err := timed(dir, "git", "init", "-q"); err != nil {
				return 0, err
			}
			return timed(dir, "sh", "-c", "git add -A && git -c user.name=b -c user.email=b@b commit -qm x")
		}},
		{"rm-rf-go-tree", "s", func(dir string) (float64, error) {
			if err := exec.Command("tar", "-C", dir, "-xf", tarball).Run(); err != nil {
				return 0, err
			}
			syscall.Sync()
			return timed(dir, "rm", "-rf", "src")
		}},
	}
}

func timed(dir, name string, args ...string) (float64, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %v: %s", name, err, out)
	}
	return time.Since(start).Seconds(), nil
}

func seqWrite(p string) (float64, error) {
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	for n := int64(0); n < *seqSize; n += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return 0, err
		}
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return float64(*seqSize) / 1e6 / time.Since(start).Seconds(), nil
}

func readAll(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Read(buf); err != nil {
			return nil
		}
	}
}

func seqRead(p string) (float64, error) {
	start := time.Now()
	if err := readAll(p); err != nil {
		return 0, err
	}
	return float64(*seqSize) / 1e6 / time.Since(start).Seconds(), nil
}

func randIO(p string, write bool) (float64, error) {
	const size, ops = 256 << 20, 20000
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			return 0, err
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 4096)
	start := time.Now()
	for range ops {
		off := int64(rng.IntN(size/4096)) * 4096
		if write {
			_, err = f.WriteAt(b, off)
		} else {
			_, err = f.ReadAt(b, off)
		}
		if err != nil {
			return 0, err
		}
	}
	return ops / time.Since(start).Seconds(), nil
}

func files(dir, phase string) (float64, error) {
	name := func(i int) string { return filepath.Join(dir, fmt.Sprintf("f%05d", i)) }
	create := func() error {
		for i := range *nFiles {
			f, err := os.Create(name(i))
			if err != nil {
				return err
			}
			f.Close()
		}
		return nil
	}
	var start time.Time
	var err error
	switch phase {
	case "create":
		start = time.Now()
		err = create()
	case "stat":
		if err = create(); err != nil {
			return 0, err
		}
		start = time.Now()
		for i := range *nFiles {
			if _, err = os.Lstat(name(i)); err != nil {
				break
			}
		}
	case "unlink":
		if err = create(); err != nil {
			return 0, err
		}
		start = time.Now()
		for i := range *nFiles {
			if err = os.Remove(name(i)); err != nil {
				break
			}
		}
	}
	if err != nil {
		return 0, err
	}
	return float64(*nFiles) / time.Since(start).Seconds(), nil
}

func statfs(dir string) (float64, error) {
	const n = 20000
	var st syscall.Statfs_t
	start := time.Now()
	for range n {
		if err := syscall.Statfs(dir, &st); err != nil {
			return 0, err
		}
	}
	return n / time.Since(start).Seconds(), nil
}

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
		out = append(out, result{name, "cairn", v, "ms"})
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

func printTable(rs []result) {
	byKey := map[[2]string]result{}
	var order []string
	for _, r := range rs {
		if _, ok := byKey[[2]string{r.Workload, "ext4"}]; !ok && r.Target == "ext4" || r.Target == "cairn" && !slices.Contains(order, r.Workload) {
			if !slices.Contains(order, r.Workload) {
				order = append(order, r.Workload)
			}
		}
		byKey[[2]string{r.Workload, r.Target}] = r
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\text4\tloopback\tcairn\tunit\tloopback vs ext4\tcairn vs ext4\t")
	for _, w := range order {
		e, l, c := byKey[[2]string{w, "ext4"}], byKey[[2]string{w, "loopback"}], byKey[[2]string{w, "cairn"}]
		ratio := func(x result) string {
			if e.Value == 0 || x.Value == 0 {
				return "-"
			}
			if e.Unit == "s" || e.Unit == "ms" { // time: how many times ext4's
				return fmt.Sprintf("%.2fx time", x.Value/e.Value)
			}
			return fmt.Sprintf("%.2fx", x.Value/e.Value)
		}
		val := func(x result) string {
			if x.Value == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f", x.Value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", w, val(e), val(l), val(c), c.Unit, ratio(l), ratio(c))
	}
	tw.Flush()
}

// goroot is the Go toolchain's root, from `go env GOROOT`.
func goroot() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "/usr/local/go"
	}
	return strings.TrimSpace(string(out))
}
