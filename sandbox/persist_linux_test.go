package sandbox_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/sandbox"
)

// seededTime is the modification time of the test base's files.
var seededTime = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)

// testRootFS builds a small base image: the host's programs and libraries
// bound read-only, and a /usr/local of its own with known content (the
// host's is large). It is a tmpfs on a temporary directory, unmounted at the
// end.
func testRootFS(t testing.TB) string {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	bindLikeHost := func(name string) {
		host := "/" + name
		fi, err := os.Lstat(host)
		if err != nil {
			return
		}
		target := filepath.Join(dir, name)
		if fi.Mode()&os.ModeSymlink != 0 {
			link, err := os.Readlink(host)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(link, target); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(host, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			t.Fatalf("bind %s: %v", host, err)
		}
	}
	for _, name := range []string{"bin", "sbin", "lib", "lib64", "etc", "usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "usr/libexec", "usr/share"} {
		bindLikeHost(name)
	}
	local := filepath.Join(dir, "usr/local")
	for _, d := range []string{"bin", "share", "private"} {
		if err := os.MkdirAll(filepath.Join(local, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string, mode os.FileMode, uid int) {
		p := filepath.Join(local, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, seededTime, seededTime); err != nil {
			t.Fatal(err)
		}
	}
	write("share/seeded.txt", "from the base\n", 0o644, 0)
	write("share/owned.txt", "owned by 1234\n", 0o640, 1234)
	write("private/key", "image's own\n", 0o600, 0)
	if err := os.Chmod(filepath.Join(local, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(local, "share/seeded.txt"), filepath.Join(local, "share/hardlink.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("share/seeded.txt", filepath.Join(local, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "root"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRun_Persist(t *testing.T) {
	root := testRootFS(t)
	ws := t.TempDir()
	spec := func(script string) *sandbox.Spec {
		return &sandbox.Spec{Args: []string{"/bin/sh", "-c", script}, Workspace: ws, RootFS: root, Persist: []string{"/usr/local"}}
	}

	// Run 1 sees the seeded base and installs something.
	o := mustRun(t, spec(`cat /usr/local/share/seeded.txt /usr/local/link /usr/local/private/key
		stat -c '%n %u %a' /usr/local/share/owned.txt
		printf '#!/bin/sh\necho installed tool\n' > /usr/local/bin/tool && chmod 755 /usr/local/bin/tool
		ls -A /workspace/.cairn | wc -l`))
	want := []string{"from the base", "from the base", "image's own", "/usr/local/share/owned.txt 1234 640", "0"}
	if got := lines(o.stdout); !slices.Equal(got, want) {
		t.Errorf("run 1: %q, want %q", got, want)
	}

	// Run 2 finds it.
	o = mustRun(t, spec("tool; cat /usr/local/share/seeded.txt"))
	if got, want := lines(o.stdout), []string{"installed tool", "from the base"}; !slices.Equal(got, want) {
		t.Errorf("run 2: %q, want %q", got, want)
	}

	// The storage, on the host: base owners, modes, times, links, and what
	// the sandbox wrote stored as uid 0.
	store := filepath.Join(ws, ".cairn/persist/usr/local")
	check := func(name string, uid uint32, mode uint32) *unix.Stat_t {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(store, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != uid || st.Mode&0o7777 != mode {
			t.Errorf("stored %s: uid %d mode %o, want %d %o", name, st.Uid, st.Mode&0o7777, uid, mode)
		}
		return &st
	}
	seeded := check("share/seeded.txt", 0, 0o644)
	if mt := time.Unix(seeded.Mtim.Unix()); !mt.Equal(seededTime) {
		t.Errorf("seeded mtime %v, want %v", mt, seededTime)
	}
	check("share/owned.txt", 1234, 0o640)
	check("private/key", 0, 0o600)
	check("bin/tool", 0, 0o755)
	if hl := check("share/hardlink.txt", 0, 0o644); hl.Ino != seeded.Ino {
		t.Errorf("the hard link was copied as a separate file")
	}
	if target, err := os.Readlink(filepath.Join(store, "link")); err != nil || target != "share/seeded.txt" {
		t.Errorf("symlink: %q, %v", target, err)
	}
}

func TestRun_PersistNested(t *testing.T) {
	// Persisting a path and one beneath it: the nested one lives in its
	// parent's storage, and is created there when the base lacks it.
	s := newSpec(t, "echo cached > /srv/cache/x && cat /srv/cache/x")
	s.Persist = []string{"/srv/cache", "/srv"}
	o := mustRun(t, s)
	if strings.TrimSpace(o.stdout) != "cached" {
		t.Fatalf("output %q", o.stdout)
	}
	if _, err := os.Stat(filepath.Join(s.Workspace, ".cairn/persist/srv/cache/x")); err != nil {
		t.Fatalf("not stored in the parent's storage: %v", err)
	}
}

func TestRun_PersistErrors(t *testing.T) {
	t.Run("MissingInBase", func(t *testing.T) {
		s := newSpec(t, "true")
		s.Persist = []string{"/no-such-directory-in-the-base"}
		o := run(t, s)
		if !errors.Is(o.err, sandbox.ErrInvalid) {
			t.Fatalf("Run = %v, want ErrInvalid", o.err)
		}
		t.Log(o.err)
	})
	t.Run("SymlinkInBase", func(t *testing.T) {
		root := testRootFS(t) // /lib is a symlink there, as on the host
		if fi, err := os.Lstat(filepath.Join(root, "lib")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Skip("the host's /lib is not a symlink")
		}
		s := newSpec(t, "true")
		s.RootFS = root
		s.Persist = []string{"/lib/x"}
		o := run(t, s)
		if !errors.Is(o.err, sandbox.ErrInvalid) {
			t.Fatalf("Run = %v, want ErrInvalid", o.err)
		}
		t.Log(o.err)
	})
	t.Run("SymlinkInWorkspace", func(t *testing.T) {
		// The workspace is the agent's: a symlink it planted where the
		// storage goes must not make host root write elsewhere.
		s := newSpec(t, "true")
		s.Persist = []string{"/srv"}
		elsewhere := t.TempDir()
		if err := os.MkdirAll(filepath.Join(s.Workspace, ".cairn"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, filepath.Join(s.Workspace, ".cairn/persist")); err != nil {
			t.Fatal(err)
		}
		o := run(t, s)
		if o.err == nil {
			t.Fatal("Run followed a symlink in the workspace's reserved directory")
		}
		t.Log(o.err)
		if ents, _ := os.ReadDir(elsewhere); len(ents) > 0 {
			t.Fatalf("host root wrote through the symlink: %v", ents)
		}
	})
}
