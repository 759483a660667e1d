package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/fusetrace"
)

// target is one file system the workloads run on, up for the whole run.
type target struct {
	name string
	dir  string // where workloads run
	fuse bool
	pid  int    // the FUSE server's process (0: none)
	dev  uint32 // the FUSE connection (fusetrace.DevOf)
	stop func() error
}

// targetDef makes a target under base. A start that returns errNA (wrapped)
// reports the target as not available, with the reason, instead of failing
// the run.
type targetDef struct {
	name  string
	start func(ctx context.Context, env *env, base string) (*target, error)
}

var errNA = errors.New("not available")

// targetDefs are the targets -targets chooses from, in table order (the
// io_uring parameter is set for any target named *+uring).
var targetDefs = []targetDef{
	{"ext4", func(_ context.Context, _ *env, base string) (*target, error) {
		dir := filepath.Join(base, "ext4")
		return &target{name: "ext4", dir: dir, stop: func() error { return nil }}, os.MkdirAll(dir, 0o755)
	}},
	{"loopback", startLoopback},
	{"passthrough_hp", func(ctx context.Context, e *env, base string) (*target, error) {
		return startPassthroughHP(ctx, e, base, false)
	}},
	{"passthrough_hp+uring", func(ctx context.Context, e *env, base string) (*target, error) {
		return startPassthroughHP(ctx, e, base, true)
	}},
	{"cairn", func(ctx context.Context, e *env, base string) (*target, error) {
		return startCairn(ctx, e, base, "cairn", "--fuse-transport=dev")
	}},
	{"cairn+uring", func(ctx context.Context, e *env, base string) (*target, error) {
		if e.uringNA != "" {
			return nil, fmt.Errorf("%w: %s", errNA, e.uringNA)
		}
		return startCairn(ctx, e, base, "cairn+uring", "--fuse-transport=uring")
	}},
}

// env is what starting targets needs from the command line and the set-up.
type env struct {
	cairnBin, passthroughHP string
	uringNA                 string // why FUSE over io_uring cannot run ("" if it can)
}

// server is a FUSE server process started by fsbench, in its own process
// group (a Ctrl-C reaches fsbench only, which unmounts).
type server struct {
	name, mnt, log string
	cmd            *exec.Cmd
	done           chan error
}

func startServer(name, mnt, log string, argv, extraEnv []string) (*server, error) {
	lf, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, mnt: mnt, log: log, cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	if err := waitMount(mnt, s.done, 20*time.Second); err != nil {
		s.stop()
		return nil, fmt.Errorf("%s: %w; its log: %s", name, err, tail(log))
	}
	return s, nil
}

// stop unmounts, which ends the server; if it does not end, it unmounts
// lazily and kills it.
func (s *server) stop() error {
	var err error
	for i := 0; ; i++ {
		if err = unix.Unmount(s.mnt, 0); err == nil || err == unix.EINVAL || i == 20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	unix.Unmount(s.mnt, unix.MNT_DETACH)
	s.cmd.Process.Kill()
	<-s.done
	return fmt.Errorf("%s did not exit after its unmount (%v): killed", s.name, err)
}

// waitMount waits until a file system is mounted at mnt (its device
// differs from its parent's), and until it answers.
func waitMount(mnt string, exited <-chan error, timeout time.Duration) error {
	var parent unix.Stat_t
	if err := unix.Stat(filepath.Dir(mnt), &parent); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		var st unix.Stat_t
		if unix.Stat(mnt, &st) == nil && st.Dev != parent.Dev {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited before mounting (%v)", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not mounted at %s after %v", mnt, timeout)
		}
	}
}

func tail(log string) string {
	b, _ := os.ReadFile(log)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

func mountDirs(base, name string) (backing, mnt string, err error) {
	backing, mnt = filepath.Join(base, name+"-backing"), filepath.Join(base, name+"-mnt")
	if err := os.MkdirAll(backing, 0o755); err != nil {
		return "", "", err
	}
	return backing, mnt, os.MkdirAll(mnt, 0o755)
}

func fuseTarget(name, mnt string, pid int, stop func() error) (*target, error) {
	dev, err := fusetrace.DevOf(mnt)
	if err != nil {
		stop()
		return nil, err
	}
	return &target{name: name, dir: mnt, fuse: true, pid: pid, dev: dev, stop: stop}, nil
}

// startLoopback: go-fuse's loopback (passthrough on, go-fuse's defaults
// otherwise), served by this binary re-executed (see serveLoopback), so that
// its CPU time is its own.
func startLoopback(_ context.Context, _ *env, base string) (*target, error) {
	backing, mnt, err := mountDirs(base, "loopback")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s, err := startServer("loopback", mnt, filepath.Join(base, "loopback.log"), []string{self, "-serve-loopback", backing, mnt}, nil)
	if err != nil {
		return nil, err
	}
	return fuseTarget("loopback", mnt, s.cmd.Process.Pid, s.stop)
}

// startPassthroughHP: libfuse's example/passthrough_hp (its defaults:
// passthrough, splice, multi-threaded), over /dev/fuse or over io_uring.
func startPassthroughHP(_ context.Context, e *env, base string, uring bool) (*target, error) {
	name := "passthrough_hp"
	if uring {
		name += "+uring"
		if e.uringNA != "" {
			return nil, fmt.Errorf("%w: %s", errNA, e.uringNA)
		}
	}
	if e.passthroughHP == "" {
		return nil, fmt.Errorf("%w: no -passthrough-hp (make fsbench builds it with internal/fsbench/libfuse.sh)", errNA)
	}
	backing, mnt, err := mountDirs(base, name)
	if err != nil {
		return nil, err
	}
	argv := []string{e.passthroughHP, "--foreground"}
	if uring {
		argv = append(argv, "-o", "io_uring")
	}
	log := filepath.Join(base, name+".log")
	// FUSE_INIT_STATUS: libfuse logs what it negotiated, io_uring included.
	s, err := startServer(name, mnt, log, append(argv, backing, mnt), []string{"FUSE_INIT_STATUS=1"})
	if err != nil {
		return nil, err
	}
	if uring {
		if err := checkURing(mnt, log); err != nil {
			s.stop()
			return nil, err
		}
	}
	return fuseTarget(name, mnt, s.cmd.Process.Pid, s.stop)
}

// checkURing reads passthrough_hp's log for its io_uring verdict, after a
// stat of the mount has waited for FUSE_INIT.
func checkURing(mnt, log string) error {
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		return err
	}
	for range 100 {
		for _, l := range strings.Split(tail(log), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "FUSE_INIT: io_uring="); ok {
				if v == "on" {
					return nil
				}
				return fmt.Errorf("%w: passthrough_hp says io_uring=%s", errNA, v)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%w: passthrough_hp did not say whether io_uring is on: %s", errNA, tail(log))
}

// startCairn mounts a new workspace with the binary (its daemon, detached)
// with extra `cairn mount` arguments.
func startCairn(ctx context.Context, e *env, base, name string, mountArgs ...string) (*target, error) {
	home, mnt := filepath.Join(base, name+"-home"), filepath.Join(base, name+"-mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	c := cairnCLI(e.cairnBin, home)
	if _, err := c(ctx, "init"); err != nil {
		return nil, err
	}
	if _, err := c(ctx, append([]string{"mount", "bench", mnt}, mountArgs...)...); err != nil {
		return nil, err
	}
	var rec struct {
		PID int `json:"pid"`
	}
	b, err := os.ReadFile(filepath.Join(home, "workspaces", "bench", "mount.json"))
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	stop := func() error {
		if _, err := c(context.Background(), "unmount", "bench"); err != nil {
			unix.Unmount(mnt, unix.MNT_DETACH)
			if rec.PID > 0 {
				syscall.Kill(rec.PID, syscall.SIGKILL)
			}
			return err
		}
		return nil
	}
	if err != nil || rec.PID <= 0 {
		stop()
		return nil, fmt.Errorf("cairn's mount record: %v (pid %d)", err, rec.PID)
	}
	return fuseTarget(name, mnt, rec.PID, stop)
}

// cairnCLI runs the binary with CAIRN_HOME=home.
func cairnCLI(bin, home string) func(ctx context.Context, args ...string) (string, error) {
	return func(ctx context.Context, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "CAIRN_HOME="+home)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("cairn %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
}

const uringParam = "/sys/module/fuse/parameters/enable_uring"

// enableURing sets the fuse module's enable_uring for the run. It returns
// what restores the old value, and why FUSE over io_uring is not available
// if the kernel does not have it or refuses.
//
// The switch is the machine's: fsbench holds an exclusive flock on it for
// the run, as cairn's tests do (internal/testenv), so that neither sets it
// back under the other.
func enableURing() (restore func(), na string) {
	lock, err := os.Open(uringParam)
	if err != nil {
		return func() {}, fmt.Sprintf("no %s (a kernel without FUSE over io_uring): %v", uringParam, err)
	}
	if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		fmt.Fprintf(os.Stderr, "fsbench: waiting for another user of %s (a test or another fsbench)\n", uringParam)
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			lock.Close()
			return func() {}, fmt.Sprintf("lock %s: %v", uringParam, err)
		}
	}
	old, err := os.ReadFile(uringParam)
	if err != nil {
		lock.Close()
		return func() {}, fmt.Sprintf("read %s: %v", uringParam, err)
	}
	was := strings.TrimSpace(string(old))
	if was == "Y" {
		return func() { lock.Close() }, ""
	}
	if err := os.WriteFile(uringParam, []byte("Y"), 0); err != nil {
		lock.Close()
		return func() {}, fmt.Sprintf("the kernel refused %s=Y: %v", uringParam, err)
	}
	restore = func() {
		if err := os.WriteFile(uringParam, []byte(was), 0); err != nil {
			fmt.Fprintf(os.Stderr, "fsbench: restore %s=%s: %v\n", uringParam, was, err)
		}
		lock.Close()
	}
	if now, _ := os.ReadFile(uringParam); strings.TrimSpace(string(now)) != "Y" {
		restore()
		return func() {}, fmt.Sprintf("%s reads %q after writing Y", uringParam, now)
	}
	fmt.Fprintf(os.Stderr, "fsbench: %s=Y for the run (was %s)\n", uringParam, was)
	return restore, ""
}
