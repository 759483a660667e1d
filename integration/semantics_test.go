package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"unsafe"

	"golang.org/x/sys/unix"
)

// asUser runs a shell command as uid/gid 1000 (another user of the mount:
// sandboxed processes are not root).
func asUser(t *testing.T, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{1000}}}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// What posixtest does not cover, as Linux does it.
func TestMount_Semantics(t *testing.T) {
	in := newInstance(t)
	dir := in.mount("sem")
	p := func(name string) string { return filepath.Join(dir, name) }
	mode := func(name string) os.FileMode {
		t.Helper()
		fi, err := os.Lstat(p(name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}

	t.Run("UmaskAppliedOnce", func(t *testing.T) {
		old := unix.Umask(0o027)
		defer unix.Umask(old)
		if err := os.WriteFile(p("umask"), nil, 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(p("umaskdir"), 0o777); err != nil {
			t.Fatal(err)
		}
		if m := mode("umask").Perm(); m != 0o640 {
			t.Errorf("file mode %o, want 640", m)
		}
		if m := mode("umaskdir").Perm(); m != 0o750 {
			t.Errorf("dir mode %o, want 750", m)
		}
	})
	t.Run("SetuidKeptOnCreateByRoot", func(t *testing.T) {
		f, err := os.OpenFile(p("suid"), os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chmod(p("suid"), 0o755|os.ModeSetuid|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
		if m := mode("suid"); m&os.ModeSetuid == 0 || m&os.ModeSetgid == 0 {
			t.Fatalf("mode %v after chmod by root", m)
		}
		// A write by another user clears both (the journal does it: the
		// mount uses HANDLE_KILLPRIV_V2).
		if err := os.Chmod(p("suid"), 0o777|os.ModeSetuid|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
		if out, err := asUser(t, "echo x >> "+p("suid")); err != nil {
			t.Fatalf("write as uid 1000: %v %s", err, out)
		}
		if m := mode("suid"); m&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Fatalf("mode %v after a write by uid 1000: setuid/setgid not cleared", m)
		}
	})
	t.Run("SetgidDirectoryInherits", func(t *testing.T) {
		if err := os.Mkdir(p("sgid"), 0o2775); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p("sgid"), 0o775|os.ModeSetgid)
		os.Chown(p("sgid"), 0, 1234)
		os.WriteFile(p("sgid/f"), nil, 0o644)
		os.Mkdir(p("sgid/d"), 0o755)
		for _, n := range []string{"sgid/f", "sgid/d"} {
			fi, _ := os.Stat(p(n))
			if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != 1234 {
				t.Errorf("%s: gid %d, want 1234 (inherited)", n, gid)
			}
		}
		if mode("sgid/d")&os.ModeSetgid == 0 {
			t.Error("subdirectory of a setgid directory is not setgid")
		}
	})
	t.Run("PermissionsForOtherUsers", func(t *testing.T) {
		os.WriteFile(p("rootonly"), []byte("x"), 0o644)
		os.Mkdir(p("private"), 0o700)
		if out, err := asUser(t, "echo y > "+p("rootonly")); err == nil {
			t.Fatalf("uid 1000 wrote a 0644 root file: %s", out)
		}
		if out, err := asUser(t, "ls "+p("private")); err == nil {
			t.Fatalf("uid 1000 listed a 0700 root directory: %s", out)
		}
		if out, err := asUser(t, "cat "+p("rootonly")); err != nil || out != "x" {
			t.Fatalf("uid 1000 cannot read a 0644 file: %v %s", err, out)
		}
	})
	t.Run("StickyDirectory", func(t *testing.T) {
		os.Mkdir(p("tmp"), 0o777)
		os.Chmod(p("tmp"), 0o777|os.ModeSticky)
		os.WriteFile(p("tmp/roots"), nil, 0o666)
		if out, err := asUser(t, "rm -f "+p("tmp/roots")); err == nil {
			if _, serr := os.Stat(p("tmp/roots")); serr != nil {
				t.Fatalf("uid 1000 removed root's file from a sticky directory: %s", out)
			}
		}
		if out, err := asUser(t, "touch "+p("tmp/mine")+" && rm "+p("tmp/mine")); err != nil {
			t.Fatalf("uid 1000 cannot remove its own file: %v %s", err, out)
		}
	})
	t.Run("RenameOverOpenFile", func(t *testing.T) {
		os.WriteFile(p("victim"), []byte("old content"), 0o644)
		f, err := os.Open(p("victim"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		os.WriteFile(p("new"), []byte("new content"), 0o644)
		if err := os.Rename(p("new"), p("victim")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		if string(b[:n]) != "old content" {
			t.Fatalf("open file after rename over it reads %q", b[:n])
		}
		if got, _ := os.ReadFile(p("victim")); string(got) != "new content" {
			t.Fatalf("renamed file reads %q", got)
		}
	})
	t.Run("MmapWriteThenRead", func(t *testing.T) {
		f, err := os.OpenFile(p("mmap"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.Truncate(8192)
		m, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		copy(m[4000:], "mapped!")
		unix.Msync(m, unix.MS_SYNC)
		unix.Munmap(m)
		got, _ := os.ReadFile(p("mmap"))
		if len(got) != 8192 || string(got[4000:4007]) != "mapped!" {
			t.Fatalf("read after mmap write: %d bytes, %q", len(got), got[4000:4007])
		}
	})
	t.Run("SparseSeekAndPunchHole", func(t *testing.T) {
		f, err := os.Create(p("holes"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.WriteAt(bytes.Repeat([]byte("a"), 1<<20), 0)
		f.WriteAt([]byte("end"), 64<<20)
		if off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_HOLE); err != nil || off != 1<<20 {
			t.Fatalf("SEEK_HOLE = %d, %v; want %d", off, err, 1<<20)
		}
		if off, err := unix.Seek(int(f.Fd()), 2<<20, unix.SEEK_DATA); err != nil || off < 60<<20 || off > 64<<20 {
			t.Fatalf("SEEK_DATA = %d, %v; want the block of 64 MiB", off, err)
		}
		if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 8192); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 3*4096)
		f.ReadAt(b, 4096)
		if !bytes.Equal(b[:8192], make([]byte, 8192)) || b[8192] != 'a' {
			t.Fatal("punched range does not read as zeros, or the rest was lost")
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync: %v", err)
		}
	})
	t.Run("NameAndPathLimits", func(t *testing.T) {
		if err := os.WriteFile(p(strings.Repeat("x", 255)), nil, 0o644); err != nil {
			t.Fatalf("255-byte name: %v", err)
		}
		err := os.WriteFile(p(strings.Repeat("x", 256)), nil, 0o644)
		if !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Fatalf("256-byte name: %v, want ENAMETOOLONG", err)
		}
		// A 4095-byte path, built through relative steps.
		deep := p("deep")
		for len(deep) < 4095-250 {
			deep = filepath.Join(deep, strings.Repeat("d", 240))
		}
		if err := os.MkdirAll(deep, 0o755); err != nil {
			t.Fatalf("deep tree: %v", err)
		}
		leaf := filepath.Join(deep, strings.Repeat("f", 4095-len(deep)-1))
		if len(leaf) != 4095 {
			t.Fatalf("test bug: path of %d bytes", len(leaf))
		}
		if err := os.WriteFile(leaf, []byte("deep"), 0o644); err != nil {
			t.Fatalf("4095-byte path: %v", err)
		}
		if got, err := os.ReadFile(leaf); err != nil || string(got) != "deep" {
			t.Fatalf("read 4095-byte path: %q, %v", got, err)
		}
	})
	t.Run("OAppendAndODirect", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			f, err := os.OpenFile(p("append"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("line\n")
			f.Close()
		}
		if got, _ := os.ReadFile(p("append")); string(got) != "line\nline\nline\n" {
			t.Fatalf("O_APPEND: %q", got)
		}
		fd, err := unix.Open(p("direct"), unix.O_CREAT|unix.O_RDWR|unix.O_DIRECT, 0o644)
		if err != nil {
			t.Fatalf("O_DIRECT open: %v", err)
		}
		defer unix.Close(fd)
		buf := alignedBlock(4096)
		copy(buf, "direct")
		if n, err := unix.Pwrite(fd, buf, 0); err != nil || n != 4096 {
			t.Fatalf("O_DIRECT write: %d, %v", n, err)
		}
		if got, _ := os.ReadFile(p("direct")); len(got) != 4096 || string(got[:6]) != "direct" {
			t.Fatal("O_DIRECT write not read back")
		}
	})
}

// alignedBlock returns a 4096-aligned buffer of n bytes (O_DIRECT).
func alignedBlock(n int) []byte {
	b := make([]byte, n+4096)
	off := 4096 - int(uintptrOf(b)%4096)
	if off == 4096 {
		off = 0
	}
	return b[off : off+n]
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
