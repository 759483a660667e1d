package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// No stale answers: what a directory listing, a lookup or a read returns
// is the workspace as it is, whichever way it changed (through the mount,
// by another process, or by the daemon: restore, rollback), whatever the
// kernel cached before.

// dirFd is a directory kept open, read again from its start (rewinddir)
// with small getdents buffers, as `ls` and `rm -rf` read.
type dirFd struct {
	t  *testing.T
	fd int
}

func openDirFd(t *testing.T, dir string) *dirFd {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return &dirFd{t, fd}
}

// names rewinds and lists the directory, "." and ".." left out, sorted.
func (d *dirFd) names() []string {
	d.t.Helper()
	if _, err := syscall.Seek(d.fd, 0, 0); err != nil {
		d.t.Fatal(err)
	}
	var names []string
	buf := make([]byte, 2048)
	for {
		n, err := syscall.Getdents(d.fd, buf)
		if err != nil {
			d.t.Fatalf("getdents: %v", err)
		}
		if n == 0 {
			break
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
	slices.Sort(names)
	return names
}

// lsNames lists dir afresh, in another process (`ls -A`).
func lsNames(t *testing.T, dir string) []string {
	t.Helper()
	out, err := exec.Command("ls", "-A", dir).Output()
	if err != nil {
		t.Fatalf("ls -A %s: %v", dir, err)
	}
	names := strings.Fields(string(out))
	slices.Sort(names)
	return names
}

// sh runs a shell command in another process, in dir.
func sh(t *testing.T, dir, cmd string) {
	t.Helper()
	c := exec.Command("sh", "-c", cmd)
	c.Dir = dir
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("sh -c %q: %v\n%s", cmd, err, out)
	}
}

// wantListing checks the open handle (rewound) first, then a fresh `ls`:
// the handle's listing is what the kernel caches for the next opener.
func wantListing(t *testing.T, what string, d *dirFd, dir string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if want == nil {
		want = []string{}
	}
	got := d.names()
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: the open handle, rewound, lists %q, want %q", what, got, want)
	}
	if got := lsNames(t, dir); !slices.Equal(append([]string{}, got...), want) {
		t.Errorf("%s: a fresh ls lists %q, want %q", what, got, want)
	}
}

// TestStale_Listing: a directory listed (and kept open), then changed by
// other processes in every way a name comes or goes, lists the change at
// once through the open handle and through a fresh ls, and `rm -rf` of its
// parent succeeds once the names are deleted. (The daemon answered each
// handle from the listing read at its opendir, and the kernel's listing
// cache, which any handle fills, kept such an old listing for every later
// opener.)
func TestStale_Listing(t *testing.T) {
	for _, mode := range []struct{ name, flag string }{{"passthrough", ""}, {"daemon-io", "--no-passthrough"}} {
		t.Run(mode.name, func(t *testing.T) {
			in := newInstance(t)
			var extra []string
			if mode.flag != "" {
				extra = append(extra, mode.flag)
			}
			root := in.mount("w", extra...)
			dir := filepath.Join(root, "top", "d")
			writeFiles(t, root, map[string]string{"top/d/a": "a\n", "elsewhere/x": "x\n", "elsewhere/y": "y\n"})
			d := openDirFd(t, dir)
			wantListing(t, "at first", d, dir, "a")
			for range 2 { // a second round with the listing cached
				wantListing(t, "unchanged", d, dir, "a")
			}

			sh(t, dir, "touch b c")
			wantListing(t, "after creates by another process", d, dir, "a", "b", "c")

			sh(t, root, "mv top/d/c elsewhere/c && mv elsewhere/x top/d/x")
			wantListing(t, "after renames out of and into it", d, dir, "a", "b", "x")

			sh(t, root, "ln elsewhere/y top/d/h && mkdir top/d/sub && ln -s a top/d/s && mknod top/d/p p")
			wantListing(t, "after a hard link, mkdir, symlink and mknod", d, dir, "a", "b", "h", "p", "s", "sub", "x")

			sh(t, dir, "mv b b2 && mv -T sub sub2")
			wantListing(t, "after renames within it", d, dir, "a", "b2", "h", "p", "s", "sub2", "x")

			sh(t, dir, "rm a b2 h p s x && rmdir sub2")
			wantListing(t, "after deletes", d, dir)

			sh(t, dir, "touch late")
			wantListing(t, "after a create in the emptied directory", d, dir, "late")
			sh(t, dir, "rm late")
			wantListing(t, "emptied again", d, dir)
			if out, err := exec.Command("rm", "-rf", filepath.Join(root, "top")).CombinedOutput(); err != nil {
				t.Fatalf("rm -rf of the parent: %v\n%s", err, out)
			}
			if _, err := os.Lstat(filepath.Join(root, "top")); !os.IsNotExist(err) {
				t.Errorf("top after rm -rf: %v", err)
			}
			if got := lsNames(t, root); !slices.Equal(got, []string{"elsewhere"}) {
				t.Errorf("root lists %q after rm -rf", got)
			}
		})
	}
}

// TestStale_ListingAfterRestoreAndRollback: changes the daemon makes by
// itself reach the listings the kernel cached and those of open handles.
func TestStale_ListingAfterRestoreAndRollback(t *testing.T) {
	in := newInstance(t)
	root := in.mount("w")
	writeFiles(t, root, map[string]string{"d/a": "a\n", "d/b": "b\n", "p/q/r.txt": "r\n", "p/other": "o\n"})
	id1 := strings.TrimSpace(in.must("snapshot", "w", "-m", "one"))
	sh(t, root, "rm d/a && touch d/c && rm -r p/q")
	dir := filepath.Join(root, "d")
	d := openDirFd(t, dir)
	rootFd := openDirFd(t, root)
	wantListing(t, "before the restore", d, dir, "b", "c")
	wantListing(t, "p before the restore", openDirFd(t, filepath.Join(root, "p")), filepath.Join(root, "p"), "other")
	if _, err := os.Stat(filepath.Join(root, "p/q/r.txt")); !os.IsNotExist(err) {
		t.Fatalf("p/q/r.txt before the restore: %v", err) // and the kernel caches that q is missing
	}

	in.must("restore", id1, "d/a")
	wantListing(t, "after a restore of a file in it", d, dir, "a", "b", "c")

	// Restored with the directory above it, which p gets back.
	in.must("restore", id1, "p/q/r.txt")
	if b, err := os.ReadFile(filepath.Join(root, "p/q/r.txt")); err != nil || string(b) != "r\n" {
		t.Errorf("p/q/r.txt after its restore: %q, %v", b, err)
	}
	wantListing(t, "p after a restore that made p/q", openDirFd(t, filepath.Join(root, "p")), filepath.Join(root, "p"), "other", "q")

	sh(t, root, "touch d/late e")
	wantListing(t, "root before the rollback", rootFd, root, "d", "e", "p")
	wantListing(t, "before the rollback", d, dir, "a", "b", "c", "late")
	in.must("rollback", "w", id1)
	wantListing(t, "root after the rollback", rootFd, root, "d", "p")
	if got := lsNames(t, dir); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("d after the rollback: a fresh ls lists %q", got)
	}
	if out, err := exec.Command("rm", "-rf", dir).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf d after the rollback: %v\n%s", err, out)
	}
}

// TestStale_FileAfterRollback: with a file open (and its bytes read, so
// cached), a forced rollback or a restore that gives it other bytes of
// another size makes a new open read exactly the snapshot's bytes, and
// stat agree. (After a rollback the kernel kept its inode of the open file
// under the same number, and a new open got that file's backing file: the
// discarded bytes, while stat showed the snapshot's size.)
func TestStale_FileAfterRollback(t *testing.T) {
	for _, mode := range []struct{ name, flag string }{{"passthrough", ""}, {"daemon-io", "--no-passthrough"}} {
		t.Run(mode.name, func(t *testing.T) {
			in := newInstance(t)
			var extra []string
			if mode.flag != "" {
				extra = append(extra, mode.flag)
			}
			root := in.mount("w", extra...)
			p := filepath.Join(root, "sub", "f.txt")
			old := []byte("the snapshot's bytes\n")
			writeFiles(t, root, map[string]string{"sub/f.txt": string(old)})
			id1 := strings.TrimSpace(in.must("snapshot", "w", "-m", "one"))
			want := func(what string) {
				t.Helper()
				b, err := os.ReadFile(p)
				if err != nil || !bytes.Equal(b, old) {
					t.Errorf("%s: a new open reads %q, %v; want %q", what, b, err, old)
				}
				fi, err := os.Stat(p)
				if err != nil || fi.Size() != int64(len(old)) {
					t.Errorf("%s: stat %v, %v; want size %d", what, fi, err, len(old))
				}
			}
			for i, how := range []string{"rollback", "restore"} {
				for _, open := range []struct {
					name string
					flag int
				}{{"O_RDONLY", os.O_RDONLY}, {"O_RDWR", os.O_RDWR}} {
					// The same inode, other bytes, another size.
					newer := bytes.Repeat([]byte{'A' + byte(i)}, 5000+open.flag)
					if err := os.WriteFile(p, newer, 0o644); err != nil {
						t.Fatal(err)
					}
					in.must("snapshot", "w", "-m", "two")
					f, err := os.OpenFile(p, open.flag, 0)
					if err != nil {
						t.Fatal(err)
					}
					if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, newer) {
						t.Fatalf("before the %s: %d bytes, %v", how, len(b), err)
					}
					if how == "rollback" {
						in.must("rollback", "--force", "w", id1)
					} else {
						in.must("restore", id1, "sub/f.txt")
					}
					want("after a " + how + " with the file open " + open.name)
					f.Close()
					want("after a " + how + ", the old " + open.name + " handle closed")
					if t.Failed() {
						return
					}
				}
			}
		})
	}
}
