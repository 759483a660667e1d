package fs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/fs"
)

// helperEnv marks a re-executed test binary as a helper that performs one
// file operation as another user (see who.do).
const helperEnv = "CAIRN_FS_TEST_HELPER"

func TestMain(m *testing.M) {
	if op := os.Getenv(helperEnv); op != "" {
		os.Exit(helper(op, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helperFailed is the exit status of a helper whose operation failed; it
// prints the errno on stdout.
const helperFailed = 3

// helper performs op ("nocaps:" first: without any capability) and
// returns the exit status.
func helper(op string, args []string) int {
	runtime.LockOSThread() // capabilities and credentials are per thread
	if rest, ok := strings.CutPrefix(op, "nocaps:"); ok {
		op = rest
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var none [2]unix.CapUserData
		if err := unix.Capset(&hdr, &none[0]); err != nil {
			fmt.Fprintln(os.Stderr, "capset:", err)
			return 1
		}
	}
	var err error
	switch op {
	case "wait": // holds a user namespace until stdin closes
		_, err = io.Copy(io.Discard, os.Stdin)
	case "create":
		var f *os.File
		if f, err = os.OpenFile(args[0], os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			err = f.Close()
		}
	case "write":
		var f *os.File
		if f, err = os.OpenFile(args[0], os.O_WRONLY, 0); err == nil {
			_, err = f.Write([]byte("written"))
			f.Close()
		}
	case "truncate":
		err = os.Truncate(args[0], 0)
	case "unlink":
		err = os.Remove(args[0])
	case "chmod":
		var mode uint64
		if mode, err = strconv.ParseUint(args[1], 8, 32); err == nil {
			err = syscall.Chmod(args[0], uint32(mode))
		}
	case "setxattr":
		err = unix.Setxattr(args[0], args[1], []byte("v"), 0)
	case "mapdirty": // maps args[0] shared, args[1] bytes, fills it with args[2] repeated; says "ready" and holds it until stdin closes
		err = mapDirty(args[0], args[1], args[2])
	case "stat":
		var st unix.Stat_t
		if err = unix.Lstat(args[0], &st); err == nil {
			fmt.Printf("%d %d", st.Uid, st.Gid)
		}
	default:
		err = fmt.Errorf("unknown helper operation %q", op)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		fmt.Print(int(errno))
		return helperFailed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// mapDirty is the helper operation "mapdirty": a process that writes to
// a file through a shared mapping and keeps it mapped, dirty and open (a
// test that serves the mount must not touch such a mapping itself: its
// page faults wait for the server, and the Go runtime cannot stop a
// thread in a page fault for a garbage collection).
func mapDirty(path, size, text string) error {
	n, err := strconv.Atoi(size)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(int64(n)); err != nil {
		return err
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return err
	}
	defer syscall.Munmap(m)
	copy(m, bytes.Repeat([]byte(text), n/len(text)+1))
	fmt.Println("ready")
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// who is a process to run a helper as: host ids, or (userns) ids of a user
// namespace that maps 0..DefaultIDMapSize-1 to host DefaultIDMapBase...,
// as a sandbox's does.
type who struct {
	uid, gid uint32
	userns   bool
	nocaps   bool // drop every capability before the operation
}

// hostUser is an unprivileged host user.
var hostUser = who{uid: 1000, gid: 1000}

func nsUser(uid uint32) who { return who{uid: uid, gid: uid, userns: true} }

// command returns the test binary re-executed as w, to perform op. The
// binary is executed through a descriptor (/proc/self/fd/3): the other
// users cannot search the directory it is in.
func (w who) command(t testing.TB, op string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bin.Close() })
	if w.nocaps {
		op = "nocaps:" + op
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/3",
		Args:       append([]string{"fs-test-helper"}, args...),
		Env:        []string{helperEnv + "=" + op},
		ExtraFiles: []*os.File{bin},
		SysProcAttr: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: w.uid, Gid: w.gid, Groups: []uint32{}},
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if w.userns {
		ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: fs.DefaultIDMapBase, Size: fs.DefaultIDMapSize}}
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = ids, ids
		cmd.SysProcAttr.GidMappingsEnableSetgroups = true
	}
	return cmd
}

// do runs op as w and returns its errno (nil on success) and output.
func (w who) do(t testing.TB, op string, args ...string) (string, error) {
	t.Helper()
	cmd := w.command(t, op, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), nil
	case errors.As(err, &exit) && exit.ExitCode() == helperFailed:
		n, _ := strconv.Atoi(out.String())
		return "", syscall.Errno(n)
	}
	t.Fatalf("helper %s %v as %+v: %v: %s", op, args, w, err, stderr.String())
	return "", nil
}
