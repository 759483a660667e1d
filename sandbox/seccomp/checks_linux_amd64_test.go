package seccomp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func lockThread() { runtime.LockOSThread() }

func ptr[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }

// runtimeChecks are what the Go runtime and standard library do in a normal
// program, run after Install in the same process.
func runtimeChecks() []check {
	return []check{
		{name: "status", fn: checkStatus("/proc/self/status")},
		{name: "all-threads", fn: checkAllThreads},
		{name: "goroutines", fn: checkGoroutines},
		{name: "gc", fn: checkGC},
		{name: "new-threads", fn: checkNewThreads},
		{name: "timers", fn: checkTimers},
		{name: "signals", fn: checkSignals},
		{name: "files", fn: checkFiles},
		{name: "tcp-loopback", fn: func() error { return checkEcho("tcp", "127.0.0.1:0") }},
		{name: "unix-socket", fn: func() error {
			dir, err := os.MkdirTemp("", "seccomp-test-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			return checkEcho("unix", filepath.Join(dir, "sock"))
		}},
		{name: "udp-loopback", fn: checkUDP},
		{name: "exec-true", fn: func() error { return exec.Command("/bin/true").Run() }},
		{name: "exec-pipes", fn: checkExecPipes},
		{name: "exec-kill", fn: checkExecKill},
		{name: "supported-after-install", fn: Supported},
		// Last: stacks a second copy of the filter.
		{name: "install-again", fn: func() error {
			if err := Install(); err != nil {
				return err
			}
			status, err := os.ReadFile("/proc/self/status")
			if err != nil {
				return err
			}
			if got := statusField(string(status), "Seccomp_filters"); got != "2" {
				return fmt.Errorf("Seccomp_filters: %s, want 2", got)
			}
			return nil
		}},
	}
}

// checkStatus checks that a thread runs under exactly one seccomp filter
// with no_new_privs.
func checkStatus(path string) func() error {
	return func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s := string(b)
		for field, want := range map[string]string{"Seccomp": "2", "Seccomp_filters": "1", "NoNewPrivs": "1"} {
			if got := statusField(s, field); got != want {
				return fmt.Errorf("%s: %s is %q, want %q", path, field, got, want)
			}
		}
		return nil
	}
}

// checkAllThreads checks every thread of the process: TSYNC gave each the
// filter and no_new_privs.
func checkAllThreads() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	if len(tasks) < 2 {
		return fmt.Errorf("only %d threads: nothing to show", len(tasks))
	}
	for _, task := range tasks {
		if err := checkStatus(filepath.Join("/proc/self/task", task.Name(), "status"))(); err != nil {
			return err
		}
	}
	return nil
}

func checkGoroutines() error {
	const n = 1000
	var wg sync.WaitGroup
	in, out := make(chan int), make(chan int, n)
	for range n {
		wg.Go(func() {
			v := <-in
			buf := make([]byte, 4096+v)
			out <- len(buf) - 4096
		})
	}
	for i := range n {
		in <- i
	}
	wg.Wait()
	close(out)
	sum := 0
	for v := range out {
		sum += v
	}
	if want := n * (n - 1) / 2; sum != want {
		return fmt.Errorf("sum %d, want %d", sum, want)
	}
	return nil
}

var sink [][]byte

func checkGC() error {
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 2000 {
		sink = append(sink, make([]byte, 64<<10))
		if i%200 == 0 {
			sink = nil
		}
	}
	sink = nil
	runtime.GC()
	debug.FreeOSMemory() // madvise
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.NumGC <= before.NumGC {
		return fmt.Errorf("no GC cycle ran (%d -> %d)", before.NumGC, after.NumGC)
	}
	return nil
}

// checkNewThreads makes the runtime start OS threads after Install (clone
// with thread flags) and checks they inherited the filter.
func checkNewThreads() error {
	before, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	const n = 8
	ready, release := make(chan int), make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready <- unix.Gettid()
			<-release
		}()
	}
	tids := map[int]bool{}
	for range n {
		tids[<-ready] = true
	}
	defer close(release)
	if len(tids) != n {
		return fmt.Errorf("%d goroutines locked to %d threads", n, len(tids))
	}
	after, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	if len(after) <= len(before) {
		return fmt.Errorf("no new thread: %d before, %d after", len(before), len(after))
	}
	for tid := range tids {
		if err := checkStatus(fmt.Sprintf("/proc/self/task/%d/status", tid))(); err != nil {
			return err
		}
	}
	return nil
}

func checkTimers() error {
	start := time.Now()
	time.Sleep(2 * time.Millisecond)
	fired := make(chan struct{})
	time.AfterFunc(time.Millisecond, func() { close(fired) })
	<-fired
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for range 3 {
		<-tick.C
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	if time.Since(start) <= 0 {
		return errors.New("the clock does not move")
	}
	return nil
}

func checkSignals() error {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	defer signal.Stop(ch)
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		return err
	}
	if s := <-ch; s != syscall.SIGUSR1 {
		return fmt.Errorf("got %v", s)
	}
	return nil
}

func checkFiles() error {
	if _, err := os.ReadFile("/etc/passwd"); err != nil {
		return err
	}
	if _, err := os.ReadFile("/etc/hostname"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dir, err := os.MkdirTemp("", "seccomp-test-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, []byte("hello"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(a, b); err != nil {
		return err
	}
	if err := os.Symlink(b, a); err != nil {
		return err
	}
	if err := os.Chmod(b, 0o644); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		return err
	}
	got, err := os.ReadFile(a)
	if err != nil {
		return err
	}
	if string(got) != "hello" {
		return fmt.Errorf("read %q", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) != 3 {
		return fmt.Errorf("%d entries, want 3", len(entries))
	}
	return nil
}

func checkEcho(network, addr string) error {
	l, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.Dial(network, l.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	msg := []byte("ping over " + network)
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

func checkUDP() error {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer pc.Close()
	if _, err := pc.WriteTo([]byte("dgram"), pc.LocalAddr()); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, _, err := pc.ReadFrom(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "dgram" {
		return fmt.Errorf("read %q", buf[:n])
	}
	return nil
}

func checkExecPipes() error {
	cmd := exec.Command("cat")
	cmd.Stdin = strings.NewReader("through a pipe")
	out, err := cmd.Output()
	if err != nil {
		return err
	}
	if string(out) != "through a pipe" {
		return fmt.Errorf("cat wrote %q", out)
	}
	return nil
}

func checkExecKill() error {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("wait: %v, want a kill", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("sleep ended with %v, want SIGKILL", ws)
	}
	return nil
}

// toolChecks run common programs under the filter (inherited across execve).
func toolChecks() []check {
	return []check{
		{name: "sh", fn: func() error {
			return runTool("ok\n", "/bin/sh", "-c", "ls / >/dev/null; cat /etc/hostname >/dev/null 2>&1 || true; echo ok")
		}},
		{name: "sh-hostname", optional: true, fn: func() error {
			if _, err := os.Stat("/etc/hostname"); err != nil {
				return fmt.Errorf("%w: no /etc/hostname", errSkip)
			}
			return runTool("", "/bin/sh", "-c", "ls / >/dev/null; cat /etc/hostname; echo ok")
		}},
		{name: "coreutils", fn: func() error {
			return runTool("ok\n", "/bin/sh", "-c",
				`set -e; ls -la / | sort | head -3 >/dev/null; date >/dev/null; id >/dev/null; uname -a >/dev/null
				d=$(mktemp -d); echo x > "$d/f"; cp "$d/f" "$d/g"; tar -C "$d" -cf "$d/t.tar" f g; tar -tf "$d/t.tar" >/dev/null
				ps -e >/dev/null 2>&1 || true; find "$d" -type f | wc -l >/dev/null; rm -r "$d"; echo ok`)
		}},
		{name: "python3", optional: true, fn: func() error {
			// Threads, subprocess (posix_spawn: clone3, then the clone
			// fallback), sockets.
			return runTool("1\nok\n", "python3", "-c", `
import socket, subprocess, threading
print(1)
t = threading.Thread(target=lambda: None); t.start(); t.join()
subprocess.run(["/bin/true"], check=True)
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); s.close()
print("ok")`)
		}},
		{name: "git", optional: true, fn: func() error {
			if err := runTool("", "git", "--version"); err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "seccomp-git-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			return runTool("", "/bin/sh", "-c", `set -e; cd "$1"; git init -q .; echo hi > f; git add f
				git -c user.email=t@example.invalid -c user.name=t commit -qm first; git log --oneline | grep -q first`, "sh", dir)
		}},
		{name: "go-version", optional: true, fn: func() error { return runTool("", "go", "version") }},
	}
}

// runTool runs a program and, if want is not empty, compares its stdout.
func runTool(want, name string, args ...string) error {
	path, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("%w: %s not found", errSkip, name)
	}
	cmd := exec.Command(path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: stderr %q", name, err, stderr.String())
	}
	if want != "" && stdout.String() != want {
		return fmt.Errorf("%s wrote %q (stderr %q), want %q", name, stdout.String(), stderr.String(), want)
	}
	return nil
}
