package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// workload is one measurement. run does it in dir (empty, on the target),
// calls m.start and m.stop around what it times, and returns the value.
type workload struct {
	name string
	unit string
	run  func(ctx context.Context, dir string, m *meter) (float64, error)
}

// assets are the inputs workloads share, made once per run (setup.go).
type assets struct {
	goTar, goTarNoCmd string // Go's src tree, and without src/cmd
	npm               npmCache
	gomod             goModCache
}

func workloads(a *assets) []workload {
	return []workload{
		{"seq-write", "MB/s", func(_ context.Context, dir string, m *meter) (float64, error) {
			return seqWrite(filepath.Join(dir, "big"), m)
		}},
		{"seq-read", "MB/s", func(_ context.Context, dir string, m *meter) (float64, error) {
			p := filepath.Join(dir, "big")
			if _, err := seqWrite(p, nil); err != nil {
				return 0, err
			}
			readAll(p) // warm
			m.start()
			if err := readAll(p); err != nil {
				return 0, err
			}
			return float64(*seqSize) / 1e6 / m.stop().Seconds(), nil
		}},
		{"rand-write-4k", "ops/s", func(_ context.Context, dir string, m *meter) (float64, error) {
			return randIO(filepath.Join(dir, "r"), true, m)
		}},
		{"rand-read-4k", "ops/s", func(_ context.Context, dir string, m *meter) (float64, error) {
			return randIO(filepath.Join(dir, "r"), false, m)
		}},
		{"create", "ops/s", func(_ context.Context, dir string, m *meter) (float64, error) { return files(dir, "create", m) }},
		{"stat", "ops/s", func(_ context.Context, dir string, m *meter) (float64, error) { return files(dir, "stat", m) }},
		{"unlink", "ops/s", func(_ context.Context, dir string, m *meter) (float64, error) { return files(dir, "unlink", m) }},
		// statfs always goes to the FUSE server: the floor of every
		// operation the kernel cannot answer from its caches.
		{"statfs", "ops/s", func(_ context.Context, dir string, m *meter) (float64, error) { return statfs(dir, m) }},
		{"tar-x", "s", func(ctx context.Context, dir string, m *meter) (float64, error) {
			return timed(ctx, m, dir, nil, "tar", "-xf", a.goTar)
		}},
		// Without src/cmd (7.7k files): passthrough_hp holds an fd per
		// inode, and git's objects for the whole tree exceed the 20k limit.
		{"git-add-commit", "s", func(ctx context.Context, dir string, m *meter) (float64, error) {
			if err := runCmd(ctx, dir, nil, "tar", "-xf", a.goTarNoCmd); err != nil {
				return 0, err
			}
			if err := runCmd(ctx, dir, nil, "git", "init", "-q"); err != nil {
				return 0, err
			}
			return timed(ctx, m, dir, nil, "sh", "-c", "git add -A && git -c user.name=b -c user.email=b@b commit -qm x")
		}},
		{"rm-rf", "s", func(ctx context.Context, dir string, m *meter) (float64, error) {
			if err := runCmd(ctx, dir, nil, "tar", "-xf", a.goTar); err != nil {
				return 0, err
			}
			syscall.Sync()
			return timed(ctx, m, dir, nil, "rm", "-rf", "src")
		}},
		{"npm-ci", "s", func(ctx context.Context, dir string, m *meter) (float64, error) {
			if err := a.npm.project(dir); err != nil {
				return 0, err
			}
			return timed(ctx, m, dir, nil, "npm", a.npm.ciArgs()...)
		}},
		{"go-mod-download", "s", func(ctx context.Context, dir string, m *meter) (float64, error) {
			envv, err := a.gomod.project(dir)
			if err != nil {
				return 0, err
			}
			return timed(ctx, m, dir, envv, "go", "mod", "download")
		}},
	}
}

func runCmd(ctx context.Context, dir string, envv []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if envv != nil {
		cmd.Env = append(os.Environ(), envv...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, tailBytes(out))
	}
	return nil
}

func timed(ctx context.Context, m *meter, dir string, envv []string, name string, args ...string) (float64, error) {
	m.start()
	err := runCmd(ctx, dir, envv, name, args...)
	d := m.stop()
	return d.Seconds(), err
}

func tailBytes(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}

// seqWrite writes *seqSize bytes to p; m may be nil (not measured).
func seqWrite(p string, m *meter) (float64, error) {
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	if m != nil {
		m.start()
	}
	for n := int64(0); n < *seqSize; n += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return 0, err
		}
	}
	err = f.Close()
	d := time.Since(start)
	if m != nil {
		d = m.stop()
	}
	return float64(*seqSize) / 1e6 / d.Seconds(), err
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

func randIO(p string, write bool, m *meter) (float64, error) {
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
	m.start()
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
	return ops / m.stop().Seconds(), nil
}

func files(dir, phase string, m *meter) (float64, error) {
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
	var err error
	switch phase {
	case "create":
		m.start()
		err = create()
	case "stat":
		if err = create(); err != nil {
			return 0, err
		}
		m.start()
		for i := range *nFiles {
			if _, err = os.Lstat(name(i)); err != nil {
				break
			}
		}
	case "unlink":
		if err = create(); err != nil {
			return 0, err
		}
		m.start()
		for i := range *nFiles {
			if err = os.Remove(name(i)); err != nil {
				break
			}
		}
	}
	d := m.stop()
	if err != nil {
		return 0, err
	}
	return float64(*nFiles) / d.Seconds(), nil
}

func statfs(dir string, m *meter) (float64, error) {
	const n = 20000
	var st syscall.Statfs_t
	m.start()
	for range n {
		if err := syscall.Statfs(dir, &st); err != nil {
			return 0, err
		}
	}
	return n / m.stop().Seconds(), nil
}
