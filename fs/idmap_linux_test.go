package fs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/fs"
	"github.com/cairnfs/cairn/journal"
)

// needIDMap skips a test when the kernel did not take FUSE_ALLOW_IDMAP
// (before Linux 6.12); in CI it fails.
func needIDMap(t *testing.T, f *fs.FS) {
	t.Helper()
	if f.IDMapped() {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("the kernel did not take FUSE_ALLOW_IDMAP (Linux 6.12), and CI must not skip this test")
	}
	t.Skip("the kernel did not take FUSE_ALLOW_IDMAP (Linux 6.12)")
}

// setup runs steps as host root (errors are fatal).
func setup(t *testing.T, steps ...error) {
	t.Helper()
	for i, err := range steps {
		if err != nil {
			t.Fatalf("setup step %d: %v", i, err)
		}
	}
}

func create(path string, mode os.FileMode, uid, gid int) error {
	if err := os.WriteFile(path, nil, mode); err != nil {
		return err
	}
	if err := os.Chown(path, uid, gid); err != nil {
		return err
	}
	return os.Chmod(path, mode) // after chown, which clears setuid and setgid
}

func mkdir(path string, mode os.FileMode, uid, gid int) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return err
	}
	if err := os.Chown(path, uid, gid); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func wantErr(t *testing.T, what string, got, want error) {
	t.Helper()
	if !errors.Is(got, want) && !(got == nil && want == nil) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// The journal's rules that depend on who calls, for host root and an
// unprivileged host user through the plain mount: the same whether the
// kernel sends the caller's ids (plain) or the daemon finds them in /proc
// (idmap).
func TestIDMap_HostCallers(t *testing.T) {
	for _, m := range []struct {
		name string
		opts fs.Options
	}{{"plain", fs.Options{}}, {"idmap", fs.Options{IDMap: true}}} {
		t.Run(m.name, func(t *testing.T) {
			dir, _, f := mountAt(t, publicDir(t), m.opts)
			if m.opts.IDMap {
				needIDMap(t, f)
			}
			p := func(name string) string { return filepath.Join(dir, name) }
			setup(t,
				os.Chmod(dir, 0o755),
				mkdir(p("sticky"), os.ModeSticky|0o777, 0, 0),
				create(p("sticky/a"), 0o644, 2000, 2000),
				create(p("sg"), 0o755, 0, 5000),
				create(p("mine"), os.ModeSetgid|0o664, 1000, 1000),
			)

			t.Run("sticky", func(t *testing.T) {
				_, err := hostUser.do(t, "unlink", p("sticky/a"))
				wantErr(t, "a user removes another's file from a sticky directory", err, syscall.EPERM)
				wantErr(t, "root removes it", os.Remove(p("sticky/a")), nil)
			})
			t.Run("setgid", func(t *testing.T) {
				// Root is not in group 5000: only its privilege keeps setgid.
				setup(t, os.Chmod(p("sg"), os.ModeSetgid|0o755))
				if got := mode(t, p("sg")); got&os.ModeSetgid == 0 {
					t.Errorf("chmod g+s by root: mode %v, setgid dropped", got)
				}
				// A truncate by the owner, in the file's group, keeps
				// setgid (no group-exec): the daemon must know the group.
				_, err := hostUser.do(t, "truncate", p("mine"))
				wantErr(t, "truncate by the owner", err, nil)
				if got := mode(t, p("mine")); got&os.ModeSetgid == 0 {
					t.Errorf("truncate by the owner in the group: mode %v, setgid dropped", got)
				}
			})
			t.Run("trusted", func(t *testing.T) {
				wantErr(t, "trusted xattr by root", unix.Setxattr(p("sg"), "trusted.x", []byte("v"), 0), nil)
				_, err := hostUser.do(t, "setxattr", p("mine"), "trusted.x")
				wantErr(t, "trusted xattr by a user", err, syscall.EPERM)
				_, err = hostUser.do(t, "setxattr", p("mine"), "user.x")
				wantErr(t, "user xattr by the owner", err, nil)
			})
		})
	}
}

// bindIDMapped binds the mount at dir, id-mapped as a sandbox binds its
// workspace (uids and gids 0..65535 are host DefaultIDMapBase...), at a new
// directory it returns; unmounted when the test ends (before the mount).
func bindIDMapped(t *testing.T, dir string) string {
	t.Helper()
	holder := nsUser(0).command(t, "wait")
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatalf("start a process in a new user namespace: %v", err)
	}
	defer func() {
		stdin.Close()
		holder.Wait()
	}()
	userns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", holder.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer userns.Close()
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		t.Fatalf("open_tree: %v", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		t.Fatalf("mount_setattr MOUNT_ATTR_IDMAP: %v", err)
	}
	bind := filepath.Join(publicDir(t), "bind")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, bind, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		t.Fatalf("move_mount: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(bind, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the id-mapped bind: %v", err)
		}
	})
	return bind
}

// A sandbox's processes through an id-mapped bind: its root owns what is
// stored as uid 0, stores what it creates as uid 0, and the journal's rules
// see its ids as the workspace's.
func TestIDMap_Bind(t *testing.T) {
	dir, j, f := mountAt(t, publicDir(t), fs.Options{IDMap: true})
	needIDMap(t, f)
	bind := bindIDMapped(t, dir)
	p := func(name string) string { return filepath.Join(dir, name) }
	b := func(name string) string { return filepath.Join(bind, name) }
	setup(t,
		os.Chmod(dir, 0o755),
		create(p("rootfile"), 0o644, 0, 0),
		create(p("userfile"), 0o644, 5000, 5000),
		create(p("sg"), 0o755, 0, 5000),
		mkdir(p("sticky"), os.ModeSticky|0o777, 5000, 5000),
		mkdir(p("pub"), 0o777, 0, 0),
		create(p("sticky/six"), 0o644, 6000, 6000),
		create(p("sticky/six2"), 0o644, 6000, 6000),
		create(p("sticky/seven"), 0o644, 7000, 7000),
	)
	ctx := context.Background()
	stored := func(name string) journal.Attr {
		t.Helper()
		parent := journal.RootIno
		if d, base := filepath.Split(name); d != "" {
			pa, err := j.Lookup(ctx, journal.RootIno, filepath.Clean(d))
			if err != nil {
				t.Fatalf("%s in the journal: %v", d, err)
			}
			parent, name = pa.Ino, base
		}
		a, err := j.Lookup(ctx, parent, name)
		if err != nil {
			t.Fatalf("%s in the journal: %v", name, err)
		}
		return a
	}

	t.Run("owners", func(t *testing.T) {
		var st unix.Stat_t
		if err := unix.Stat(b("rootfile"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != fs.DefaultIDMapBase || st.Gid != fs.DefaultIDMapBase {
			t.Errorf("uid 0 through the bind, to host root: %d:%d, want %d", st.Uid, st.Gid, fs.DefaultIDMapBase)
		}
		out, err := nsUser(0).do(t, "stat", b("rootfile"))
		if err != nil || out != "0 0" {
			t.Errorf("uid 0 through the bind, to the namespace's root: %q (%v), want \"0 0\"", out, err)
		}
		out, err = nsUser(0).do(t, "stat", b("userfile"))
		if err != nil || out != "5000 5000" {
			t.Errorf("uid 5000 through the bind, to the namespace's root: %q (%v), want \"5000 5000\"", out, err)
		}
	})
	t.Run("create", func(t *testing.T) {
		for _, uid := range []uint32{0, 1000} {
			name := fmt.Sprintf("pub/new%d", uid)
			if _, err := nsUser(uid).do(t, "create", b(name)); err != nil {
				t.Fatalf("create as the namespace's uid %d: %v", uid, err)
			}
			if a := stored(name); a.UID != uid || a.GID != uid {
				t.Errorf("created by the namespace's uid %d (host %d): stored as %d:%d", uid, fs.DefaultIDMapBase+uid, a.UID, a.GID)
			}
		}
	})
	t.Run("permissions", func(t *testing.T) {
		root := nsUser(0)
		root.nocaps = true
		_, err := root.do(t, "write", b("rootfile"))
		wantErr(t, "the namespace's root (no capabilities) writes uid 0's 0644 file", err, nil)
		_, err = root.do(t, "write", b("userfile"))
		wantErr(t, "the namespace's root (no capabilities) writes uid 5000's 0644 file", err, syscall.EACCES)
		// With CAP_DAC_OVERRIDE in its namespace, which maps uid 5000,
		// it may: the kernel checks the mapped owner as on any disk.
		_, err = nsUser(0).do(t, "write", b("userfile"))
		wantErr(t, "the namespace's root (its capabilities) writes uid 5000's 0644 file", err, nil)
		_, err = nsUser(1000).do(t, "write", b("rootfile"))
		wantErr(t, "the namespace's uid 1000 writes uid 0's 0644 file", err, syscall.EACCES)
	})
	t.Run("setgid", func(t *testing.T) {
		// The namespace's root is not in group 5000: only its privilege
		// (in the journal: being uid 0) keeps setgid.
		_, err := nsUser(0).do(t, "chmod", b("sg"), "2755")
		wantErr(t, "chmod g+s by the namespace's root", err, nil)
		if a := stored("sg"); a.Mode&journal.ModeSetgid == 0 {
			t.Errorf("chmod g+s by the namespace's root: stored mode %o, setgid dropped", a.Mode)
		}
	})
	t.Run("sticky", func(t *testing.T) {
		_, err := nsUser(6000).do(t, "unlink", b("sticky/six"))
		wantErr(t, "the owner removes its file from a sticky directory", err, nil)
		_, err = nsUser(7000).do(t, "unlink", b("sticky/six2"))
		wantErr(t, "another user removes it", err, syscall.EPERM)
		_, err = nsUser(5000).do(t, "unlink", b("sticky/seven"))
		wantErr(t, "the directory's owner removes another's file", err, nil)
		_, err = nsUser(0).do(t, "unlink", b("sticky/six2"))
		wantErr(t, "the namespace's root removes another's file", err, nil)
	})
}

// What the caller's lookup in /proc costs the requests that need it
// (unlink, write, chmod: their header has no ids with idmap), next to
// create (whose header has them) and to the same requests without idmap.
// I/O goes through the daemon, so that writes reach it.
func BenchmarkIDMap(b *testing.B) {
	for _, m := range []struct {
		name string
		opts fs.Options
	}{{"plain", fs.Options{NoPassthrough: true}}, {"idmap", fs.Options{NoPassthrough: true, IDMap: true}}} {
		b.Run(m.name, func(b *testing.B) {
			dir, _ := mount(b, m.opts)
			p := func(i int) string { return filepath.Join(dir, fmt.Sprintf("f%d", i)) }
			next := 0 // names are not reused across the runs of a benchmark
			b.Run("create", func(b *testing.B) {
				for range b.N {
					next++
					fd, err := unix.Open(p(next), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
					if err != nil {
						b.Fatal(err)
					}
					unix.Close(fd)
				}
			})
			b.Run("unlink", func(b *testing.B) {
				first := next + 1
				for range b.N {
					next++
					if err := os.WriteFile(p(next), nil, 0o644); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for i := range b.N {
					if err := unix.Unlink(p(first + i)); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("write", func(b *testing.B) {
				f, err := os.Create(filepath.Join(dir, "w"))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				buf := make([]byte, 4096)
				b.SetBytes(int64(len(buf)))
				b.ResetTimer()
				for range b.N {
					if _, err := f.WriteAt(buf, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("chmod", func(b *testing.B) {
				path := filepath.Join(dir, "c")
				if err := os.WriteFile(path, nil, 0o644); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := range b.N {
					if err := unix.Chmod(path, 0o644|uint32(i&1)<<6); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
