package landlock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary re-executes itself to run Restrict in a child, so the test
// process itself is never confined. These variables carry the child's role
// and its inputs.
const (
	envMode     = "CAIRN_LANDLOCK_TEST_MODE" // "probe", "deny-all" or "write"
	envWritable = "CAIRN_LANDLOCK_TEST_WRITABLE"
	envOutside  = "CAIRN_LANDLOCK_TEST_OUTSIDE"
	envAbstract = "CAIRN_LANDLOCK_TEST_ABSTRACT"
	envTarget   = "CAIRN_LANDLOCK_TEST_TARGET"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envMode); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

// needLandlock skips (fails in CI) when the kernel has no Landlock, and
// returns its ABI.
func needLandlock(t *testing.T) int {
	t.Helper()
	abi, err := Supported()
	if err == nil {
		return abi
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("landlock unavailable and CI must not skip: %v", err)
	}
	t.Skipf("landlock unavailable: %v", err)
	return 0
}

func TestSupported(t *testing.T) {
	abi := needLandlock(t)
	if abi < 1 {
		t.Fatalf("Supported() = %d, want >= 1", abi)
	}
	t.Logf("kernel Landlock ABI %d: handled fs %#x, scopes %#x, restrict flags %#x",
		abi, handledFS(abi), scopes(abi), restrictFlags(abi))
}

func TestAllowed(t *testing.T) {
	handled7 := handledFS(7)
	for _, tc := range []struct {
		name    string
		rule    Rule
		dir     bool
		handled uint64
		want    uint64
	}{
		{"ReadDir", Rule{Path: "/"}, true, handled7, accessRead},
		{"ReadFile", Rule{Path: "/f"}, false, handled7,
			unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE},
		{"WriteDir", Rule{Path: "/", Write: true}, true, handled7, handled7},
		{"WriteFile", Rule{Path: "/f", Write: true}, false, handled7,
			unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
				unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE |
				unix.LANDLOCK_ACCESS_FS_IOCTL_DEV},
		{"WriteFileABI1", Rule{Path: "/f", Write: true}, false, handledFS(1),
			unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
				unix.LANDLOCK_ACCESS_FS_READ_FILE},
		{"WriteFileABI9", Rule{Path: "/f", Write: true}, false, handledFS(9),
			accessFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := allowed(tc.rule, tc.dir, tc.handled); got != tc.want {
				t.Fatalf("allowed = %#x, want %#x", got, tc.want)
			}
		})
	}
	if handledFS(4) != handledFS(3) {
		t.Errorf("ABI 4 handles filesystem rights %#x, want those of ABI 3 (%#x): network rights are not handled",
			handledFS(4), handledFS(3))
	}
	if scopes(5) != 0 || scopes(6) == 0 {
		t.Errorf("scopes(5)=%#x scopes(6)=%#x: scoping starts at ABI 6", scopes(5), scopes(6))
	}
}

func TestRestrict_InvalidRules(t *testing.T) {
	needLandlock(t)
	// These fail before anything about the thread changes, so they run in
	// the test process itself.
	for _, tc := range []struct {
		name string
		rule Rule
	}{
		{"Empty", Rule{}},
		{"Relative", Rule{Path: "tmp"}},
		{"Missing", Rule{Path: filepath.Join(t.TempDir(), "missing")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Restrict([]Rule{{Path: "/"}, tc.rule})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Restrict = %v, want an error wrapping ErrInvalid", err)
			}
		})
	}
}

// outcome is one operation's result in the child: "ok" or an errno name.
type outcome = map[string]string

// runChild re-executes the test binary in mode with env and returns what it
// printed.
func runChild(t *testing.T, mode string, env ...string) outcome {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), append(env, envMode+"="+mode)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child %s: %v\nstderr:\n%s", mode, err, stderr.String())
	}
	got := outcome{}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("child %s output %q: %v\nstderr:\n%s", mode, stdout.String(), err, stderr.String())
	}
	t.Logf("child %s: %v", mode, got)
	return got
}

// expect checks that every listed operation ended as wanted (any of the
// alternatives).
func expect(t *testing.T, got outcome, op string, want ...string) {
	t.Helper()
	for _, w := range want {
		if got[op] == w {
			return
		}
	}
	t.Errorf("%s: got %q, want one of %q", op, got[op], want)
}

func TestRestrict(t *testing.T) {
	abi := needLandlock(t)

	writable := t.TempDir()
	outside := t.TempDir()
	for name, data := range map[string]string{"existing": "outside data", "writable-file": "w"} {
		if err := os.WriteFile(filepath.Join(outside, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(writable, "moveme"), []byte("m"), 0o644); err != nil {
		t.Fatal(err)
	}

	// An abstract unix socket of the host, outside any Landlock domain.
	abstract := fmt.Sprintf("@cairn-landlock-test-%d-%s", os.Getpid(), filepath.Base(writable))
	ln, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatalf("listen on abstract socket: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	got := runChild(t, "probe",
		envWritable+"="+writable, envOutside+"="+outside, envAbstract+"="+abstract)

	t.Run("Setup", func(t *testing.T) {
		expect(t, got, "before.abstract.connect", "ok")
		expect(t, got, "restrict", "ok")
		expect(t, got, "abi", strconv.Itoa(abi))
	})
	t.Run("WriteInsideWritable", func(t *testing.T) {
		for _, op := range []string{"inside.create", "inside.write", "inside.mkdir", "inside.rename",
			"inside.rename.subdir", "inside.symlink", "inside.truncate", "inside.remove", "inside.rmdir"} {
			expect(t, got, op, "ok")
		}
	})
	t.Run("WriteOutsideDenied", func(t *testing.T) {
		for _, op := range []string{"outside.create", "outside.write", "outside.remove", "outside.rename",
			"outside.mkdir", "outside.symlink", "outside.mkfifo"} {
			expect(t, got, op, "EACCES")
		}
		if abi >= abiTruncate {
			expect(t, got, "outside.truncate", "EACCES")
		}
		b, err := os.ReadFile(filepath.Join(outside, "existing"))
		if err != nil || string(b) != "outside data" {
			t.Errorf("outside file after the child: %q, %v; want it untouched", b, err)
		}
		for _, name := range []string{"new", "renamed", "dir", "link", "fifo"} {
			if _, err := os.Lstat(filepath.Join(outside, name)); err == nil {
				t.Errorf("%s was created outside the writable directory", name)
			}
		}
	})
	t.Run("FileRule", func(t *testing.T) {
		// A write rule on a single file: that file is writable, its
		// directory is not.
		expect(t, got, "filerule.write", "ok")
		expect(t, got, "filerule.sibling.create", "EACCES")
	})
	t.Run("ReadOutside", func(t *testing.T) {
		expect(t, got, "outside.read", "ok")
		expect(t, got, "outside.readdir", "ok")
	})
	t.Run("Exec", func(t *testing.T) {
		expect(t, got, "exec.true", "ok")
	})
	t.Run("Devices", func(t *testing.T) {
		// A write rule on a device file applies; "/" read-only does not
		// let other devices be opened for writing.
		expect(t, got, "devnull.write", "ok")
		expect(t, got, "devzero.write", "EACCES")
	})
	t.Run("MoveIntoReadOnly", func(t *testing.T) {
		// Landlock reports a missing make right as EACCES, a missing refer
		// right alone as EXDEV; either way the file must not move.
		expect(t, got, "rename.into.readonly", "EACCES", "EXDEV")
		expect(t, got, "link.into.readonly", "EACCES", "EXDEV")
		if _, err := os.Stat(filepath.Join(writable, "moveme")); err != nil {
			t.Errorf("moveme left the writable directory: %v", err)
		}
	})
	t.Run("ChildInherits", func(t *testing.T) {
		expect(t, got, "grandchild.write.outside", "EACCES")
		expect(t, got, "grandchild.write.inside", "ok")
		expect(t, got, "grandchild.sh.write.outside", "failed")
		expect(t, got, "grandchild.sh.write.inside", "ok")
	})
	t.Run("AbstractUnixSocket", func(t *testing.T) {
		if abi < abiScope {
			t.Skipf("Landlock ABI %d has no IPC scoping (needs 6)", abi)
		}
		expect(t, got, "abstract.connect", "EPERM")
	})
	t.Run("SignalOutside", func(t *testing.T) {
		if abi < abiScope {
			t.Skipf("Landlock ABI %d has no IPC scoping (needs 6)", abi)
		}
		expect(t, got, "signal.parent", "EPERM")
	})
}

func TestRestrict_NoRulesDeniesEverything(t *testing.T) {
	needLandlock(t)
	got := runChild(t, "deny-all")
	expect(t, got, "restrict", "ok")
	expect(t, got, "read", "EACCES")
	expect(t, got, "readdir", "EACCES")
	expect(t, got, "exec", "EACCES")
}

// childMain runs in the re-executed test binary.
func childMain(mode string) int {
	res := outcome{}
	switch mode {
	case "probe":
		probe(res)
	case "deny-all":
		res["restrict"] = errName(Restrict(nil))
		_, err := os.ReadFile("/etc/passwd")
		res["read"] = errName(err)
		_, err = os.ReadDir("/")
		res["readdir"] = errName(err)
		res["exec"] = errName(exec.Command("/bin/true").Run())
	case "write":
		// Grandchild: report whether it may create the target file.
		fd, err := unix.Open(os.Getenv(envTarget), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		res["write"] = errName(err)
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", mode)
		return 2
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// probe restricts itself to read everywhere and write under the writable
// directory (and one file outside it), then tries everything.
func probe(res outcome) {
	writable, outside, abstract := os.Getenv(envWritable), os.Getenv(envOutside), os.Getenv(envAbstract)
	in := func(name string) string { return filepath.Join(writable, name) }
	out := func(name string) string { return filepath.Join(outside, name) }

	res["before.abstract.connect"] = errName(connectAbstract(abstract))

	abi, err := Supported()
	res["abi"] = strconv.Itoa(abi)
	if err != nil {
		res["abi"] = err.Error()
	}
	// os/exec opens /dev/null for unset stdio: like any sandbox that makes
	// "/" read-only, this one needs a write rule on it.
	err = Restrict([]Rule{
		{Path: "/"},
		{Path: writable, Write: true},
		{Path: out("writable-file"), Write: true},
		{Path: "/dev/null", Write: true},
	})
	res["restrict"] = errName(err)
	if err != nil {
		return
	}

	res["inside.create"] = errName(os.WriteFile(in("new"), []byte("x"), 0o644))
	res["inside.write"] = errName(os.WriteFile(in("new"), []byte("longer"), 0o644))
	res["inside.mkdir"] = errName(unix.Mkdir(in("sub"), 0o755))
	res["inside.rename"] = errName(unix.Rename(in("new"), in("renamed")))
	res["inside.rename.subdir"] = errName(unix.Rename(in("renamed"), in("sub/moved")))
	res["inside.symlink"] = errName(unix.Symlink("moved", in("sub/link")))
	res["inside.truncate"] = errName(unix.Truncate(in("sub/moved"), 0))
	res["inside.remove"] = errName(errors.Join(unix.Unlink(in("sub/moved")), unix.Unlink(in("sub/link"))))
	res["inside.rmdir"] = errName(unix.Rmdir(in("sub")))

	res["outside.create"] = errName(openClose(out("new"), unix.O_WRONLY|unix.O_CREAT))
	res["outside.write"] = errName(openClose(out("existing"), unix.O_WRONLY))
	res["outside.truncate"] = errName(unix.Truncate(out("existing"), 0))
	res["outside.remove"] = errName(unix.Unlink(out("existing")))
	res["outside.rename"] = errName(unix.Rename(out("existing"), out("renamed")))
	res["outside.mkdir"] = errName(unix.Mkdir(out("dir"), 0o755))
	res["outside.symlink"] = errName(unix.Symlink("existing", out("link")))
	res["outside.mkfifo"] = errName(unix.Mkfifo(out("fifo"), 0o644))
	b, err := os.ReadFile(out("existing"))
	if err == nil && string(b) != "outside data" {
		err = fmt.Errorf("read %q", b)
	}
	res["outside.read"] = errName(err)
	_, err = os.ReadDir(outside)
	res["outside.readdir"] = errName(err)

	res["filerule.write"] = errName(openClose(out("writable-file"), unix.O_WRONLY|unix.O_TRUNC))
	res["filerule.sibling.create"] = errName(openClose(out("sibling"), unix.O_WRONLY|unix.O_CREAT))

	res["exec.true"] = errName(exec.Command("/bin/true").Run())
	res["devnull.write"] = errName(openClose("/dev/null", unix.O_WRONLY))
	res["devzero.write"] = errName(openClose("/dev/zero", unix.O_WRONLY))

	res["rename.into.readonly"] = errName(unix.Rename(in("moveme"), out("moveme")))
	res["link.into.readonly"] = errName(unix.Link(in("moveme"), out("moveme")))

	res["grandchild.write.outside"] = grandchildWrite(out("from-grandchild"))
	res["grandchild.write.inside"] = grandchildWrite(in("from-grandchild"))
	res["grandchild.sh.write.outside"] = shWrite(out("from-sh"))
	res["grandchild.sh.write.inside"] = shWrite(in("from-sh"))

	res["abstract.connect"] = errName(connectAbstract(abstract))
	res["signal.parent"] = errName(unix.Kill(os.Getppid(), 0))
}

func openClose(path string, flags int) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func connectAbstract(name string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: name})
}

// grandchildWrite runs the test binary again, from the restricted thread, to
// create target, and returns what it reported.
func grandchildWrite(target string) string {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envMode+"=write", envTarget+"="+target)
	b, err := cmd.Output()
	if err != nil {
		return "grandchild: " + err.Error()
	}
	var res outcome
	if err := json.Unmarshal(b, &res); err != nil {
		return "grandchild output: " + err.Error()
	}
	return res["write"]
}

// shWrite has /bin/sh redirect into target: "ok" or "failed".
func shWrite(target string) string {
	if err := exec.Command("/bin/sh", "-c", `echo x > "$1"`, "sh", target).Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "failed"
		}
		return err.Error()
	}
	return "ok"
}

// errName is "ok", the errno's name, or the error's text.
func errName(err error) string {
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}
