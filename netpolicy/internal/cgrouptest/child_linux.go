package cgrouptest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Run re-executes the test binary (running no test: the caller's TestMain
// recognises env and does the work) as a child started inside the cgroup2
// directory cgroup (CLONE_INTO_CGROUP), in a new network namespace if
// newNetns, with env added to this process's environment. The child dies
// with the test (PDEATHSIG). Run returns the child's stdout, or an error
// carrying its stderr when it fails.
func Run(t testing.TB, cgroup string, newNetns bool, env ...string) ([]byte, error) {
	t.Helper()
	dir, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	if os.Getenv("GORACE") == "" {
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0") // a -race child need not linger
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &unix.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd()), Pdeathsig: unix.SIGKILL}
	if newNetns {
		cmd.SysProcAttr.Cloneflags = unix.CLONE_NEWNET
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// TCPServer listens on addr (port 0: any) and answers each connection's
// first line with "ok:" and the line; for "bulk N" it first reads N more
// bytes. It serves until the test ends, and returns its address.
func TCPServer(t testing.TB, addr string) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if n, ok := strings.CutPrefix(strings.TrimSpace(line), "bulk "); ok {
					size, _ := strconv.ParseInt(n, 10, 64)
					if _, err := io.CopyN(io.Discard, r, size); err != nil {
						return
					}
				}
				c.Write([]byte("ok:" + line))
			})
		}
	})
	return l.Addr().(*net.TCPAddr).AddrPort()
}
