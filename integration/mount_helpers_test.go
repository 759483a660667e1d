package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/testenv"
)

// instance is one state directory (one "machine") over a store.
type instance struct {
	t     *testing.T
	home  string
	store string
	extra []string // more environment (S3 credentials)
}

// newInstance makes a state directory whose default local store is
// initialised (zero configuration).
func newInstance(t *testing.T) *instance {
	testenv.NeedRoot(t, "FUSE mounts", true)
	home := shortTempDir(t)
	in := &instance{t: t, home: home, store: filepath.Join(home, "store")}
	t.Cleanup(in.unmountAll)
	in.must("init")
	return in
}

// otherMachine is a second state directory over the same store.
func (in *instance) otherMachine() *instance {
	o := &instance{t: in.t, home: shortTempDir(in.t), store: in.store, extra: in.extra}
	in.t.Cleanup(o.unmountAll)
	return o
}

// unmountAll takes down every mount the instance still has when its test
// ends (before its home is removed), whatever the test did: no daemon or
// mount outlives a test.
func (in *instance) unmountAll() {
	recs, _ := filepath.Glob(filepath.Join(in.home, "workspaces", "*", "mount.json"))
	for _, p := range recs {
		ws := filepath.Base(filepath.Dir(p))
		in.cleanupMount(ws, in.record(ws).dirOrEmpty())
	}
}

// shortTempDir is a temporary directory with a short path: control
// sockets live under it, and unix socket paths are short.
func shortTempDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "ci-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func (in *instance) env() []string {
	return append([]string{"CAIRN_HOME=" + in.home, "CAIRN_STORE=" + in.store}, in.extra...)
}

func (in *instance) run(args ...string) result {
	in.t.Helper()
	return cairn(in.t, in.env(), args...)
}

func (in *instance) must(args ...string) string {
	in.t.Helper()
	r := in.run(args...)
	if r.code != 0 {
		in.t.Fatalf("cairn %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// mount mounts ws at a new directory (or dir) and makes sure the test
// leaves no mount and no daemon behind, whatever happens.
func (in *instance) mount(ws string, extra ...string) string {
	in.t.Helper()
	dir := shortTempDir(in.t)
	in.mountAt(ws, dir, extra...)
	return dir
}

func (in *instance) mountAt(ws, dir string, extra ...string) {
	in.t.Helper()
	args := append([]string{"mount"}, extra...)
	in.must(append(args, ws, dir)...)
	in.t.Cleanup(func() { in.cleanupMount(ws, dir) })
}

// cleanupMount unmounts through the CLI, and if anything is left (a test
// failed halfway), kills the daemon and detaches the mount.
func (in *instance) cleanupMount(ws, dir string) {
	if rec := in.record(ws); rec != nil {
		in.run("unmount", "--no-wait", ws) // a test's S3 may be down: do not wait for uploads
		if rec.alive() {
			syscall.Kill(rec.PID, syscall.SIGKILL)
			time.Sleep(50 * time.Millisecond)
		}
	}
	if isMounted(dir) {
		unix.Unmount(dir, unix.MNT_DETACH)
	}
}

type record struct {
	PID    int    `json:"pid"`
	Dir    string `json:"dir"`
	Socket string `json:"socket"`
}

func (r *record) alive() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.PID))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

func (in *instance) record(ws string) *record {
	b, err := os.ReadFile(filepath.Join(in.home, "workspaces", ws, "mount.json"))
	if err != nil {
		return nil
	}
	var r record
	if json.Unmarshal(b, &r) != nil {
		return nil
	}
	return &r
}

func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// manifest describes a tree exactly: every stat field cairn promises to
// keep (atime aside), xattrs, contents and link targets, hard links by
// inode number.
func manifest(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("mode=%o uid=%d gid=%d nlink=%d ino=%d mtime=%d.%09d ctime=%d.%09d",
			st.Mode, st.Uid, st.Gid, st.Nlink, st.Ino, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		switch fi.Mode().Type() {
		case 0:
			line += fmt.Sprintf(" size=%d sha=%s", st.Size, fileHash(t, p))
		case os.ModeSymlink:
			target, _ := os.Readlink(p)
			line += " target=" + target
		case os.ModeDevice | os.ModeCharDevice, os.ModeDevice:
			line += fmt.Sprintf(" rdev=%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		line += " xattrs=" + xattrs(p)
		out[rel] = line
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

func fileHash(t *testing.T, p string) string {
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("open %s: %v", p, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func xattrs(p string) string {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return "-"
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		v := make([]byte, 64<<10)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			parts = append(parts, name+"=?")
			continue
		}
		parts = append(parts, name+"="+hex.EncodeToString(v[:m]))
	}
	return strings.Join(parts, ",")
}

// diffManifests fails the test with the differences of two manifests.
func diffManifests(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("  %s: missing (want %s)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("  %s:\n    want %s\n    got  %s", k, w, g))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("  %s: unexpected (%s)", k, g))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		if len(diffs) > 30 {
			diffs = append(diffs[:30], fmt.Sprintf("  ... %d more", len(diffs)-30))
		}
		t.Fatalf("%s: trees differ:\n%s", what, strings.Join(diffs, "\n"))
	}
}
