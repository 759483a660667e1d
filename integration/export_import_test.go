package integration

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fillExportTree writes, through a mount, a tree with every kind of entry:
// buildTree's (contents, a multi-chunk file, setuid/setgid/sticky, owners,
// ns times, xattrs, hardlinks, symlinks, a FIFO, a device, empty
// directories, a 1 GiB sparse file, a 255-byte name, a deep path) under
// tree/, a few more there, a 1 TiB sparse file with two writes at the
// root, and root attributes of its own.
func fillExportTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	tree := filepath.Join(root, "tree")
	buildTree(t, tree)
	must(os.WriteFile(filepath.Join(tree, "empty-file"), nil, 0o640))
	must(os.WriteFile(filepath.Join(tree, "group-only"), []byte("setgid, other owner"), 0o600))
	must(os.Chown(filepath.Join(tree, "group-only"), 1234, 5678))
	must(os.Chmod(filepath.Join(tree, "group-only"), 0o2750|os.ModeSetgid))
	must(unix.Setxattr(filepath.Join(tree, "README.md"), "user.bin", []byte("\x00\xff\n=bin\x00"), 0))
	ns := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
	must(os.Chtimes(filepath.Join(tree, "owned"), ns, ns))

	f, err := os.Create(filepath.Join(root, "huge"))
	must(err)
	_, err = f.WriteAt([]byte("first write"), 1<<20)
	must(err)
	_, err = f.WriteAt([]byte("second write"), 700<<30)
	must(err)
	must(f.Truncate(1 << 40))
	must(f.Close())

	must(os.Chmod(root, 0o751))
	must(os.Chown(root, 1000, 1001))
	must(unix.Setxattr(root, "user.root", []byte("top"), 0))
	must(os.Chtimes(root, ns, ns.Add(time.Second)))
}

// rootManifest describes a tree made by fillExportTree: manifest of tree/,
// plus the root's own attributes and the 1 TiB file (which manifest would
// read whole) by its stat data and its non-zero bytes. Inode numbers, which
// differ between copies, become the first path of each inode.
func rootManifest(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range manifest(t, filepath.Join(root, "tree")) {
		out[path.Join("tree", k)] = v
	}
	out["."] = statLine(t, root)
	huge := filepath.Join(root, "huge")
	out["huge"] = statLine(t, huge) + " data=" + nonZero(t, huge)
	return byFirstPath(out)
}

func statLine(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf("mode=%o uid=%d gid=%d nlink=%d ino=%d mtime=%d.%09d ctime=%d.%09d",
		st.Mode, st.Uid, st.Gid, st.Nlink, st.Ino, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		line += fmt.Sprintf(" size=%d", st.Size) // a directory's size is the file system's business
	}
	return line + " xattrs=" + xattrs(p)
}

// nonZero lists a sparse file's non-zero bytes with their offsets, reading
// only what SEEK_DATA reports (failing if that is more than a few MiB: the
// holes were lost).
func nonZero(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	var runs []string
	var data int64
	for off := int64(0); off < fi.Size(); {
		d, err := f.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, syscall.ENXIO) {
			break
		}
		if err != nil {
			t.Fatalf("%s: SEEK_DATA: %v", p, err)
		}
		h, err := f.Seek(d, unix.SEEK_HOLE)
		if err != nil {
			t.Fatalf("%s: SEEK_HOLE: %v", p, err)
		}
		if data += h - d; data > 8<<20 {
			t.Fatalf("%s: more than 8 MiB of data (up to %d): its holes were not kept", p, h)
		}
		b := make([]byte, h-d)
		if _, err := f.ReadAt(b, d); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(b); {
			if b[i] == 0 {
				i++
				continue
			}
			j := i
			for j < len(b) && b[j] != 0 {
				j++
			}
			runs = append(runs, fmt.Sprintf("%d:%s", d+int64(i), hex.EncodeToString(b[i:j])))
			i = j
		}
		off = h
	}
	return strings.Join(runs, ",")
}

var inoRE = regexp.MustCompile(`ino=(\d+)`)

// byFirstPath replaces each inode number with the first path (in sorted
// order) that has it: copies of a tree then compare equal, hardlinks
// included.
func byFirstPath(m map[string]string) map[string]string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	first := map[string]string{}
	for _, k := range keys {
		if ino := inoRE.FindStringSubmatch(m[k]); ino != nil && first[ino[1]] == "" {
			first[ino[1]] = k
		}
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = inoRE.ReplaceAllStringFunc(v, func(s string) string { return "ino=" + first[s[4:]] })
	}
	return out
}

var ctimeRE = regexp.MustCompile(` ctime=\S+`)

// withoutCtime drops ctimes, which an extraction cannot set.
func withoutCtime(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = ctimeRE.ReplaceAllString(v, "")
	}
	return out
}

// A tree with every kind of entry, written through a mount and
// snapshotted, goes out with `cairn export`, is extracted by GNU tar with
// everything (ctime aside), and comes back into new workspaces with
// `cairn import` from the extracted directory and from the archive, each
// identical through a mount.
func TestExportImport_RoundTrip(t *testing.T) {
	needTool(t, "tar")
	in := newInstance(t)
	src := in.mount("src")
	fillExportTree(t, src)
	id := strings.TrimSpace(in.must("snapshot", "src", "-m", "to export"))
	// The reference is the live tree; a remount (the snapshot as stored)
	// shows the same, "huge" included: written through passthrough, then
	// truncated while open, it once came back with another mtime.
	want := rootManifest(t, src)
	in.must("unmount", src)
	in.mountAt("src", src)
	diffManifests(t, "remounted from the snapshot", want, rootManifest(t, src))

	work := shortTempDir(t)
	archive := filepath.Join(work, "src.tar")
	start := time.Now()
	out := in.must("export", "src", "-o", archive)
	elapsed := time.Since(start)
	fi, err := os.Stat(archive)
	if err != nil || !strings.Contains(out, "exported snapshot "+id[:12]) {
		t.Fatalf("export said %q; archive: %v", out, err)
	}
	t.Logf("export: %d bytes in %v (a 1 TiB and a 1 GiB sparse file, a 3 MiB file)", fi.Size(), elapsed)
	if fi.Size() > 8<<20 {
		t.Fatalf("the archive is %d bytes: sparse files were written with their holes", fi.Size())
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	// The same bytes whichever way the snapshot is named, file or stdout.
	if r := in.run("export", id[:12]); r.code != 0 || r.stdout != string(data) {
		t.Fatalf("export of %s to stdout: exit %d, %d bytes (want the file's %d); stderr %s", id[:12], r.code, len(r.stdout), len(data), r.stderr)
	}
	again := filepath.Join(work, "again.tar")
	in.must("export", "src@1", "-o", again)
	if b, _ := os.ReadFile(again); !bytes.Equal(b, data) {
		t.Fatal("a second export (of src@1) differs from the first")
	}

	// GNU tar extracts all of it, sparse files with their holes.
	ext := filepath.Join(work, "x")
	if err := os.Mkdir(ext, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "-xpf", archive, "-C", ext)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, b)
	}
	extracted := rootManifest(t, ext)
	diffManifests(t, "extracted by GNU tar (ctime aside)", withoutCtime(want), withoutCtime(extracted))
	for _, p := range []string{"huge", "tree/sparse"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(ext, p), &st); err != nil || st.Blocks*512 > 1<<20 {
			t.Fatalf("extracted %s: %d bytes allocated (%v): holes were written", p, st.Blocks*512, err)
		}
	}

	// Import the extracted directory: the mount shows it exactly (ctime
	// included: import keeps the source's).
	in.must("import", "from-dir", ext, "-m", "from the extracted tree")
	diffManifests(t, "imported from the directory", extracted, rootManifest(t, in.mount("from-dir")))

	// Import the archive: the mount shows the original tree exactly.
	var rep importJSON
	if err := json.Unmarshal([]byte(in.must("import", "from-tar", archive, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Workspace != "from-tar" || rep.Seq != 1 || rep.Stats.Files < 10 || rep.Stats.Dirs < 20 || len(rep.Excluded) != 0 {
		t.Fatalf("import --json: %+v", rep)
	}
	diffManifests(t, "imported from the archive", want, rootManifest(t, in.mount("from-tar")))

	// A pipe: export to stdout, import from stdin.
	sh := exec.Command("sh", "-c", `"$CAIRN" export src | "$CAIRN" import from-pipe - --json`)
	sh.Env = append(in.env(), "PATH="+os.Getenv("PATH"), "CAIRN="+cairnBin)
	b, err := sh.Output()
	var piped importJSON
	if err != nil || json.Unmarshal(b, &piped) != nil || piped.Stats.Files != rep.Stats.Files || piped.Stats.Bytes != rep.Stats.Bytes {
		t.Fatalf("export | import -: %v\n%s", err, b)
	}
}

// importJSON is what `cairn import --json` prints.
type importJSON struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
	Seq       uint64 `json:"seq"`
	Stats     struct {
		Files, Dirs, Symlinks, Others, Bytes uint64
	} `json:"stats"`
	Excluded []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"excluded"`
}

// --exclude leaves paths out with their subtrees, and lists each one in
// the snapshot record.
func TestExportImport_Exclude(t *testing.T) {
	in := newInstance(t)
	src := t.TempDir()
	for _, f := range []string{".git/config", ".git/objects/ab/cdef", "a.pyc", "src/b.pyc", "src/main.go", "keep.txt", "lib/.git"} {
		p := filepath.Join(src, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var rep importJSON
	if err := json.Unmarshal([]byte(in.must("import", "ex", src, "--exclude", ".git", "--exclude", "*.pyc", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(rep.Excluded)
	if want := "[{.git --exclude .git} {a.pyc --exclude *.pyc} {lib/.git --exclude .git} {src/b.pyc --exclude *.pyc}]"; got != want {
		t.Fatalf("excluded %s, want %s", got, want)
	}
	if rep.Stats.Files != 2 || rep.Stats.Dirs != 3 {
		t.Fatalf("stats %+v: want 2 files (keep.txt, src/main.go), 3 dirs (root, lib, src)", rep.Stats)
	}
	dir := in.mount("ex")
	for _, p := range []string{".git", "a.pyc", "src/b.pyc", "lib/.git"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("%s is in the mount: %v", p, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "src/main.go")); err != nil || string(b) != "src/main.go" {
		t.Errorf("src/main.go: %q %v", b, err)
	}

	// From an archive, without --json: the exclusions are printed.
	archive := filepath.Join(t.TempDir(), "ex.tar")
	in.must("export", "ex", "-o", archive)
	r := in.run("import", "ex2", archive, "--exclude", "src")
	if r.code != 0 || strings.TrimSpace(r.stderr) != "cairn: excluded src (--exclude src)" || len(strings.TrimSpace(r.stdout)) != 64 {
		t.Fatalf("import --exclude src: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// Bad input gets a one-line error and the documented exit code, and no
// workspace.
func TestExportImport_BadInput(t *testing.T) {
	in := newInstance(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), bytes.Repeat([]byte("data "), 2000), 0o644); err != nil {
		t.Fatal(err)
	}
	in.must("import", "seeded", src)
	work := t.TempDir()
	good := filepath.Join(work, "good.tar")
	in.must("export", "seeded", "-o", good)
	data, _ := os.ReadFile(good)
	corrupt := bytes.Clone(data)
	hdr := bytes.Index(data, []byte("./f\x00")) // f's header block
	if hdr < 0 || hdr%512 != 0 {
		t.Fatalf("no header block for ./f in the archive (%d)", hdr)
	}
	copy(corrupt[hdr:], "garbage where a header should be")
	files := map[string][]byte{"corrupt.tar": corrupt, "truncated.tar": data[:len(data)/2], "text.tar": []byte("not a tar archive\n")}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(work, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"ExportUnknown", []string{"export", "nothing", "-o", filepath.Join(work, "x.tar")}, 3, "workspaces: seeded"},
		{"ExportUnknownSeq", []string{"export", "seeded@7"}, 3, "no snapshot @7"},
		{"ExportArgs", []string{"export"}, 2, "SNAP"},
		{"ExportToDir", []string{"export", "seeded", "-o", work}, 2, "is a directory"},
		{"ImportExisting", []string{"import", "seeded", src}, 4, "cairn fork"},
		{"ImportCorrupt", []string{"import", "c1", filepath.Join(work, "corrupt.tar")}, 1, "not a valid tar archive"},
		{"ImportTruncated", []string{"import", "c2", filepath.Join(work, "truncated.tar")}, 1, "truncated tar archive"},
		{"ImportText", []string{"import", "c3", filepath.Join(work, "text.tar")}, 1, "not a valid tar archive"},
		{"ImportMissing", []string{"import", "c4", "/nonexistent/dir"}, 3, "does not exist"},
		{"ImportBadName", []string{"import", "bad/name", src}, 2, "workspace name"},
		{"ImportBadPattern", []string{"import", "c5", src, "--exclude", "[x"}, 2, "--exclude"},
		{"ImportArgs", []string{"import", "onlyone"}, 2, "WORKSPACE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := in.run(c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", r.code, c.code, r.stderr, c.want)
			}
			if strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 || strings.Contains(r.stderr, "panic") {
				t.Fatalf("not a one-line error: %q", r.stderr)
			}
		})
	}
	// A failed import leaves no workspace behind, and no partial archive.
	for _, ws := range []string{"c1", "c2", "c3", "c4", "c5"} {
		if r := in.run("export", ws); r.code != 3 {
			t.Errorf("workspace %s exists after a failed import: export exit %d", ws, r.code)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(work, ".*tmp*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// An unreadable file: root reads everything, so run cairn without the
	// capabilities that let it.
	needTool(t, "setpriv") // util-linux
	secret := filepath.Join(src, "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search",
		cairnBin, "import", "unreadable", src)
	cmd.Env = append(in.env(), "PATH="+os.Getenv("PATH"), "HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), secret+": permission denied") {
		t.Fatalf("import of a tree with an unreadable file: %v, stderr %q", err, stderr.String())
	}
	if r := in.run("export", "unreadable"); r.code != 3 {
		t.Errorf("workspace unreadable exists after a failed import: export exit %d", r.code)
	}
}
