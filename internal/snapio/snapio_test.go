package snapio

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/chunkstoretest"
)

func newStore(t *testing.T) *chunkstore.Store {
	t.Helper()
	return chunkstoretest.NewStore(t, chunkstoretest.LocalBackend(t), chunkstore.InitOptions{}, chunkstore.Options{})
}

// buildDir writes a tree with every kind of entry into a new directory.
// Owners and devices need root; without it they are left out.
func buildDir(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := func(name string) string { return filepath.Join(root, name) }
	w := func(name string, data []byte, mode os.FileMode) {
		t.Helper()
		must(os.MkdirAll(filepath.Dir(p(name)), 0o755))
		must(os.WriteFile(p(name), data, 0o600))
		must(os.Chmod(p(name), mode))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	big := make([]byte, 3<<20) // > DirectChunksMax chunks: chunk lists
	for i := range big {
		big[i] = byte(rng.IntN(256))
	}
	w("README.md", []byte("# hi\n"), 0o644)
	w("empty", nil, 0o600)
	w("src/big.bin", big, 0o640)
	w("bin/suid", []byte("#!/bin/sh\n"), 0o755|os.ModeSetuid|os.ModeSetgid)
	must(os.MkdirAll(p("empty-dir/inner"), 0o700))
	must(os.Mkdir(p("sticky"), 0o777))
	must(os.Chmod(p("sticky"), 0o777|os.ModeSticky))
	must(os.Link(p("README.md"), p("src/readme-link")))
	must(os.Link(p("README.md"), p("z-link")))
	must(os.Symlink("../README.md", p("src/readme.sym")))
	must(unix.Mkfifo(p("fifo"), 0o640))
	must(unix.Setxattr(p("README.md"), "user.bin", []byte{0, 0xff, '\n', '='}, 0))
	must(unix.Setxattr(p("empty-dir"), "user.empty", nil, 0))
	must(unix.Setxattr(root, "user.root", []byte("r"), 0))
	w(strings.Repeat("n", 255), []byte("long"), 0o644)
	f, err := os.Create(p("sparse"))
	must(err)
	_, err = f.WriteAt([]byte("in the middle"), 3<<20)
	must(err)
	must(f.Truncate(8 << 20))
	must(f.Close())
	f, err = os.Create(p("huge"))
	must(err)
	f.WriteAt([]byte("first"), 1<<20)
	f.WriteAt([]byte("second"), 700<<30)
	must(f.Truncate(1 << 40))
	must(f.Close())
	if os.Geteuid() == 0 {
		must(os.Chown(p("src/big.bin"), 1234, 5678))
		must(os.Lchown(p("src/readme.sym"), 7, 8))
		must(unix.Mknod(p("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		must(unix.Mknod(p("blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(259, 70000))))
	}
	ns := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
	must(os.Chtimes(p("README.md"), ns, ns))
	must(unix.Lutimes(p("src/readme.sym"), []unix.Timeval{{Sec: 1e9}, {Sec: 1e9}}))
	must(os.Chtimes(p("src"), ns, ns.Add(time.Nanosecond)))
	must(os.Chtimes(root, ns, ns.Add(2)))
	return root
}

func opts(ws string) ImportOptions {
	return ImportOptions{Workspace: ws, Host: "h", Version: "test", Message: "m"}
}

// A directory imported, exported, and the archive imported again gives
// the same trees: every attribute crosses both ways, and inode numbers are
// assigned the same way.
func TestSnapio_RoundTrip(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	dir := buildDir(t)
	var progress []Progress
	o := opts("from-dir")
	o.Progress = func(p Progress) { progress = append(progress, p) }
	id1, s1, err := ImportDir(ctx, store, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(progress) == 0 || progress[len(progress)-1].Bytes < 3<<20 {
		t.Fatalf("progress: %v", progress[max(0, len(progress)-3):])
	}
	if ref, err := store.Ref(ctx, "from-dir"); err != nil || ref.Snapshot != id1 {
		t.Fatalf("ref %v %v", ref, err)
	}
	var buf bytes.Buffer
	start := time.Now()
	es, err := Export(ctx, store, id1, &buf, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("export: %d entries, %d bytes in %v", es.Entries, buf.Len(), time.Since(start))
	if buf.Len() > 5<<20 || es.Bytes != uint64(buf.Len()) {
		t.Fatalf("archive of %d bytes (stats %d): the holes were written", buf.Len(), es.Bytes)
	}
	var again bytes.Buffer
	if _, err := Export(ctx, store, id1, &again, ExportOptions{}); err != nil || !bytes.Equal(again.Bytes(), buf.Bytes()) {
		t.Fatalf("a second export differs (%v)", err)
	}
	id2, s2, err := ImportTar(ctx, store, bytes.NewReader(buf.Bytes()), "a.tar", opts("from-tar"))
	if err != nil {
		t.Fatal(err)
	}
	if s1.Root != s2.Root {
		t.Fatalf("trees differ after export and import:\n%s", treeDiff(t, store, s1.Root, s2.Root, ""))
	}
	if !rootAttrEqual(s1.RootAttr, s2.RootAttr) || s1.NextIno != s2.NextIno || s1.Seq != 1 || s2.Workspace != "from-tar" {
		t.Fatalf("records differ:\n%+v\n%+v", s1, s2)
	}
	st1, st2 := s1.Stats, s2.Stats
	st1.NewBlobs, st1.NewBytes, st2.NewBlobs, st2.NewBytes = 0, 0, 0, 0
	if st1 != st2 || st1.Files != st1.ChangedFiles || st1.Symlinks != 1 || st1.Dirs != 6 {
		t.Fatalf("stats %+v, %+v", s1.Stats, s2.Stats)
	}
	if s2.Stats.NewBlobs > 5 { // the content was there already: only trees differ... or not even
		t.Errorf("the second import stored %d new blobs", s2.Stats.NewBlobs)
	}
	ch1, _ := store.Changes(ctx, s1)
	ch2, _ := store.Changes(ctx, s2)
	if !slices.Equal(ch1, ch2) || !slices.ContainsFunc(ch1, func(c chunkstore.Change) bool { return c.Path == "src/readme-link" && c.Op == chunkstore.ChangeAdded }) {
		t.Fatalf("changes: %v", ch1)
	}
	_ = id2
	checkTree(t, store, s1)
}

func rootAttrEqual(a, b chunkstore.RootAttr) bool {
	return a.Mode == b.Mode && a.UID == b.UID && a.GID == b.GID && a.Atime == b.Atime && a.Mtime == b.Mtime && a.Ctime == b.Ctime &&
		slices.EqualFunc(a.Xattrs, b.Xattrs, func(x, y chunkstore.Xattr) bool { return x.Name == y.Name && bytes.Equal(x.Value, y.Value) })
}

// checkTree spot-checks what the import recorded.
func checkTree(t *testing.T, store *chunkstore.Store, s *chunkstore.Snapshot) {
	t.Helper()
	ctx := context.Background()
	root, err := store.Tree(ctx, s.Root)
	if err != nil {
		t.Fatal(err)
	}
	get := func(tr *chunkstore.Tree, name string) *chunkstore.Entry {
		e, ok := tr.Find(name)
		if !ok {
			t.Fatalf("no %q", name)
		}
		return e
	}
	readme, link := get(root, "README.md"), get(root, "z-link")
	if readme.Ino != link.Ino || readme.Nlink != 3 || string(readme.Inline) != "# hi\n" || readme.Mtime%1e9 != 123456789 {
		t.Errorf("README.md: %+v", readme)
	}
	if x := readme.Xattrs; len(x) != 1 || x[0].Name != "user.bin" || !bytes.Equal(x[0].Value, []byte{0, 0xff, '\n', '='}) {
		t.Errorf("README.md xattrs: %v", x)
	}
	if e := get(root, "bin"); e.Nlink != 2 {
		t.Errorf("bin: nlink %d", e.Nlink)
	}
	if e := get(root, "empty-dir"); e.Nlink != 3 || len(e.Xattrs) != 1 || e.Xattrs[0].Value != nil {
		t.Errorf("empty-dir: %+v", e)
	}
	if e := get(root, "sticky"); e.Mode != 0o1777 {
		t.Errorf("sticky: mode %o", e.Mode)
	}
	if e := get(root, "huge"); e.Size != 1<<40 || len(e.Chunks) > 10 {
		t.Errorf("huge: size %d, %d chunks", e.Size, len(e.Chunks))
	}
	if e := get(root, "fifo"); e.Type != chunkstore.TypeFIFO || e.Mode != 0o640 {
		t.Errorf("fifo: %+v", e)
	}
	if os.Geteuid() == 0 {
		if e := get(root, "blk"); e.Type != chunkstore.TypeBlockDev || e.Rdev != unix.Mkdev(259, 70000) {
			t.Errorf("blk: %+v", e)
		}
	}
	src, err := store.Tree(ctx, get(root, "src").Subtree)
	if err != nil {
		t.Fatal(err)
	}
	big := get(src, "big.bin")
	if len(big.ChunkLists) == 0 || big.Size != 3<<20 {
		t.Errorf("big.bin: %d chunk lists, size %d", len(big.ChunkLists), big.Size)
	}
	if os.Geteuid() == 0 && (big.UID != 1234 || big.GID != 5678) {
		t.Errorf("big.bin: owner %d:%d", big.UID, big.GID)
	}
	if e := get(src, "readme.sym"); e.Target != "../README.md" || e.Mtime != 1e18 {
		t.Errorf("readme.sym: %+v", e)
	}
	if s.NextIno <= readme.Ino || s.RootAttr.Mode == 0 {
		t.Errorf("next ino %d, root mode %o", s.NextIno, s.RootAttr.Mode)
	}
}

// treeDiff describes how two trees differ, for failure messages.
func treeDiff(t *testing.T, store *chunkstore.Store, a, b chunkstore.ID, prefix string) string {
	ctx := context.Background()
	ta, err1 := store.Tree(ctx, a)
	tb, err2 := store.Tree(ctx, b)
	if err1 != nil || err2 != nil {
		return fmt.Sprint(err1, err2)
	}
	var out []string
	for _, ea := range ta.Entries {
		eb, ok := tb.Find(ea.Name)
		switch {
		case !ok:
			out = append(out, prefix+ea.Name+": missing")
		case ea.Type == chunkstore.TypeDir && eb.Type == chunkstore.TypeDir:
			if ea.Subtree != eb.Subtree {
				x, y := ea, *eb
				x.Subtree, y.Subtree = chunkstore.ID{}, chunkstore.ID{}
				if fmt.Sprint(x) != fmt.Sprint(y) {
					out = append(out, fmt.Sprintf("%s%s:\n  %+v\n  %+v", prefix, ea.Name, x, y))
				}
				out = append(out, treeDiff(t, store, ea.Subtree, eb.Subtree, prefix+ea.Name+"/"))
			}
		case fmt.Sprint(ea) != fmt.Sprint(*eb):
			out = append(out, fmt.Sprintf("%s%s:\n  %+v\n  %+v", prefix, ea.Name, ea, *eb))
		}
	}
	if len(ta.Entries) != len(tb.Entries) {
		out = append(out, fmt.Sprintf("%s: %d entries, %d", prefix, len(ta.Entries), len(tb.Entries)))
	}
	return strings.Join(out, "\n")
}

// The archive holds what GNU tar and archive/tar expect: "./" first, tree
// order, hardlinks to the first name, a sparse entry's content.
func TestExport_Archive(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	id, _, err := ImportDir(ctx, store, buildDir(t), opts("ws"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Export(ctx, store, id, &buf, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		switch hdr.Name {
		case "./":
			if hdr.Typeflag != tar.TypeDir || hdr.PAXRecords["SCHILY.xattr.user.root"] != "r" || hdr.ChangeTime.IsZero() {
				t.Errorf("root: %+v", hdr)
			}
		case "./z-link", "./src/readme-link":
			if hdr.Typeflag != tar.TypeLink || hdr.Linkname != "./README.md" {
				t.Errorf("%s: %+v", hdr.Name, hdr)
			}
		case "./sparse":
			b, err := io.ReadAll(tr)
			if err != nil || len(b) != 8<<20 || string(b[3<<20:3<<20+13]) != "in the middle" {
				t.Errorf("sparse: %d bytes, %v", len(b), err)
			}
		case "./bin/suid":
			if hdr.Mode != 0o6755 {
				t.Errorf("suid: mode %o", hdr.Mode)
			}
		}
	}
	if names[0] != "./" || !slices.Contains(names, "./empty-dir/inner/") || slices.Index(names, "./README.md") > slices.Index(names, "./src/readme-link") {
		t.Fatalf("entries: %v", names)
	}
	if !slices.IsSortedFunc(names[1:4], strings.Compare) {
		t.Fatalf("not in tree order: %v", names)
	}
}

// Sockets cannot go into a tar archive: left out, with a warning.
func TestExport_Socket(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	dir := t.TempDir()
	l, err := (&netListener{}).listen(filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l()
	id, snap, err := ImportDir(ctx, store, dir, opts("ws"))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Stats.Others != 1 {
		t.Fatalf("stats %+v", snap.Stats)
	}
	var warned []string
	es, err := Export(ctx, store, id, io.Discard, ExportOptions{Warn: func(m string) { warned = append(warned, m) }})
	if err != nil || es.Skipped != 1 || len(warned) != 1 || !strings.Contains(warned[0], "./sock") {
		t.Fatalf("export: %+v %v %v", es, warned, err)
	}
}

type netListener struct{}

func (netListener) listen(p string) (func(), error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: p}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return func() { unix.Close(fd) }, nil
}

func TestImport_Exclude(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	dir := t.TempDir()
	for _, f := range []string{".git/config", ".git/objects/ab", "a.pyc", "src/b.pyc", "src/keep.go", "keep.txt", "node_modules/x/y.js", "sub/.git/HEAD"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}
	os.Link(filepath.Join(dir, "a.pyc"), filepath.Join(dir, "src/a-link"))
	o := opts("ws")
	o.Exclude = []string{".git", "*.pyc", "node_modules/"}
	id, snap, err := ImportDir(ctx, store, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	want := []chunkstore.Exclusion{{Path: ".git", Reason: "--exclude .git"}, {Path: "a.pyc", Reason: "--exclude *.pyc"}, {Path: "node_modules", Reason: "--exclude node_modules"},
		{Path: "src/b.pyc", Reason: "--exclude *.pyc"}, {Path: "sub/.git", Reason: "--exclude .git"}}
	if !slices.Equal(snap.Excluded, want) {
		t.Fatalf("excluded %v, want %v", snap.Excluded, want)
	}
	// keep.txt, src/keep.go, src/a-link (a name of a.pyc the patterns keep);
	// the root, src, sub.
	if snap.Stats.Files != 3 || snap.Stats.Dirs != 3 {
		t.Fatalf("stats %+v", snap.Stats)
	}
	var buf bytes.Buffer
	if _, err := Export(ctx, store, id, &buf, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte("objects/ab")) || !bytes.Contains(buf.Bytes(), []byte("keep.go")) {
		t.Fatal("export has excluded paths, or lacks kept ones")
	}

	// From a tar: the same patterns; a hard link to an excluded file is
	// left out and says why.
	dir2 := t.TempDir()
	os.WriteFile(filepath.Join(dir2, "x.pyc"), []byte("x"), 0o644)
	os.Link(filepath.Join(dir2, "x.pyc"), filepath.Join(dir2, "y"))
	os.MkdirAll(filepath.Join(dir2, "d/.git/o"), 0o755)
	os.WriteFile(filepath.Join(dir2, "d/.git/o/1"), []byte("1"), 0o644)
	id2, _, err := ImportDir(ctx, store, dir2, opts("ws2"))
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	Export(ctx, store, id2, &buf, ExportOptions{})
	o = opts("ws3")
	o.Exclude = []string{"*.pyc", "d/.git"}
	_, snap3, err := ImportTar(ctx, store, &buf, "x.tar", o)
	if err != nil {
		t.Fatal(err)
	}
	want = []chunkstore.Exclusion{{Path: "d/.git", Reason: "--exclude d/.git"}, {Path: "x.pyc", Reason: "--exclude *.pyc"}, {Path: "y", Reason: "--exclude *.pyc (a hard link to x.pyc, which it excludes)"}}
	if !slices.Equal(snap3.Excluded, want) {
		t.Fatalf("excluded %v, want %v", snap3.Excluded, want)
	}
	if snap3.Stats.Files != 0 || snap3.Stats.Dirs != 2 {
		t.Fatalf("stats %+v", snap3.Stats)
	}
}

// Tar archives from elsewhere: implied directories, absolute paths,
// entries listed twice, compression.
func TestImportTar_Archives(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	mtime := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.ModTime, h.Size = mtime, int64(len(body))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	add(&tar.Header{Name: "/abs/a/file", Typeflag: tar.TypeReg, Mode: 0o644}, "first")
	add(&tar.Header{Name: "abs/a/file", Typeflag: tar.TypeReg, Mode: 0o600}, "second version")
	add(&tar.Header{Name: "abs/a/", Typeflag: tar.TypeDir, Mode: 0o711}, "")
	add(&tar.Header{Name: "abs/link", Typeflag: tar.TypeLink, Linkname: "/abs/a/file"}, "")
	add(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644}, strings.Repeat("0123456789", 10000))
	tw.Close()

	check := func(t *testing.T, ws string, r io.Reader) {
		_, snap, err := ImportTar(ctx, store, r, "x", opts(ws))
		if err != nil {
			t.Fatal(err)
		}
		root, _ := store.Tree(ctx, snap.Root)
		abs, _ := root.Find("abs")
		if abs == nil || abs.Mode != 0o755 || abs.Nlink != 3 {
			t.Fatalf("implied dir: %+v", abs)
		}
		at, _ := store.Tree(ctx, abs.Subtree)
		a, _ := at.Find("a")
		link, _ := at.Find("link")
		if a == nil || a.Mode != 0o711 || link == nil || link.Nlink != 2 {
			t.Fatalf("a %+v, link %+v", a, link)
		}
		ft, _ := store.Tree(ctx, a.Subtree)
		if f, _ := ft.Find("file"); f == nil || string(f.Inline) != "second version" || f.Ino != link.Ino || f.Mode != 0o600 {
			t.Fatalf("file: %+v", f)
		}
		if snap.Stats.Files != 2 || snap.Stats.Bytes != 100000+14 {
			t.Fatalf("stats %+v", snap.Stats)
		}
	}
	t.Run("Plain", func(t *testing.T) { check(t, "plain", bytes.NewReader(buf.Bytes())) })
	t.Run("Gzip", func(t *testing.T) {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(buf.Bytes())
		zw.Close()
		check(t, "gz", &z)
	})
	t.Run("Zstd", func(t *testing.T) {
		zw, _ := zstd.NewWriter(nil)
		check(t, "zst", bytes.NewReader(zw.EncodeAll(buf.Bytes(), nil)))
	})
}

// Bad input fails before the ref moves, with a message naming the problem.
func TestImport_Errors(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	good := t.TempDir()
	os.WriteFile(filepath.Join(good, "f"), []byte("x"), 0o644)
	if _, _, err := ImportDir(ctx, store, good, opts("taken")); err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	tw.WriteHeader(&tar.Header{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "dir/file", Typeflag: tar.TypeReg, Mode: 0o644, Size: 10000})
	tw.Write(bytes.Repeat([]byte("y"), 10000))
	tw.Close()
	tarOf := func(hdrs ...*tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hdrs {
			tw.WriteHeader(h)
		}
		tw.Close()
		return b.Bytes()
	}
	badSum := bytes.Clone(archive.Bytes())
	badSum[512+10] ^= 0x55 // the second header's name: its checksum fails
	for _, c := range []struct {
		name string
		run  func(ws string) error
		is   error
		want string
	}{
		{"Exists", func(string) error { _, _, err := ImportDir(ctx, store, good, opts("taken")); return err }, chunkstore.ErrConflict, "cairn fork"},
		{"BadName", func(string) error { _, _, err := ImportDir(ctx, store, good, opts("bad/name")); return err }, chunkstore.ErrInvalid, "workspace name"},
		{"BadPattern", func(ws string) error {
			o := opts(ws)
			o.Exclude = []string{"[x"}
			_, _, err := ImportDir(ctx, store, good, o)
			return err
		}, chunkstore.ErrInvalid, "--exclude"},
		{"MissingDir", func(ws string) error { _, _, err := ImportDir(ctx, store, good+"/nope", opts(ws)); return err }, chunkstore.ErrNotFound, "nope"},
		{"NotADir", func(ws string) error { _, _, err := ImportDir(ctx, store, good+"/f", opts(ws)); return err }, chunkstore.ErrInvalid, "not a directory"},
		{"Truncated", tarErr(ctx, store, archive.Bytes()[:2000]), nil, "truncated tar archive"},
		{"Checksum", tarErr(ctx, store, badSum), nil, "not a valid tar archive (at byte"},
		{"NotTar", tarErr(ctx, store, bytes.Repeat([]byte("hello world\n"), 100)), nil, "not a valid tar archive"},
		{"Empty", tarErr(ctx, store, nil), nil, "empty"},
		{"DotDot", tarErr(ctx, store, tarOf(&tar.Header{Name: "a/../../etc/passwd", Typeflag: tar.TypeReg})), nil, `".."`},
		{"LinkMissing", tarErr(ctx, store, tarOf(&tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "nowhere"})), nil, "does not hold"},
		{"LongName", tarErr(ctx, store, tarOf(&tar.Header{Name: strings.Repeat("x", 256), Typeflag: tar.TypeReg})), nil, "255"},
		{"ParentIsFile", tarErr(ctx, store, tarOf(&tar.Header{Name: "f", Typeflag: tar.TypeReg}, &tar.Header{Name: "f/g", Typeflag: tar.TypeReg})), nil, "not a directory"},
		{"Xz", tarErr(ctx, store, []byte("\xfd7zXZ\x00rest")), nil, "xz"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws := strings.ToLower(c.name)
			err := c.run(ws)
			if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v; want %v containing %q", err, c.is, c.want)
			}
			if _, err := store.Ref(ctx, ws); !errors.Is(err, chunkstore.ErrNotFound) {
				t.Fatalf("ref of %s after a failed import: %v", ws, err)
			}
		})
	}
}

func tarErr(ctx context.Context, store *chunkstore.Store, data []byte) func(string) error {
	return func(ws string) error {
		_, _, err := ImportTar(ctx, store, bytes.NewReader(data), "in.tar", opts(ws))
		return err
	}
}

// An unreadable file is an error naming it. Root reads everything, so the
// test drops the capability that lets it.
func TestImportDir_Unreadable(t *testing.T) {
	if os.Getenv("SNAPIO_UNREADABLE_CHILD") != "" {
		store := newStore(t)
		_, _, err := ImportDir(context.Background(), store, os.Getenv("SNAPIO_UNREADABLE_CHILD"), opts("ws"))
		if err == nil || !strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("err = %v", err)
		}
		return
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	os.WriteFile(p, []byte("x"), 0o000)
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("setpriv"); err != nil {
			t.Skip("as root, needs setpriv to drop CAP_DAC_OVERRIDE")
		}
		cmd := exec.Command("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search",
			os.Args[0], "-test.run=^TestImportDir_Unreadable$", "-test.v")
		cmd.Env = append(os.Environ(), "SNAPIO_UNREADABLE_CHILD="+dir)
		if out, err := cmd.CombinedOutput(); err != nil || !bytes.Contains(out, []byte("--- PASS")) {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	os.Setenv("SNAPIO_UNREADABLE_CHILD", dir)
	defer os.Unsetenv("SNAPIO_UNREADABLE_CHILD")
	TestImportDir_Unreadable(t)
}

func TestExcluder(t *testing.T) {
	x, err := newExcluder([]string{".git", "*.pyc", "./build/", "a/b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, prefix string
		ok           bool
	}{
		{".git", ".git", true}, {"x/.git/config", "x/.git", true}, {"m.pyc", "m.pyc", true}, {"d/m.pyc", "d/m.pyc", true},
		{"build/x", "build", true}, {"a/b/c", "a/b", true}, {"x/a/b", "", false}, {"gitx", "", false}, {"src/main.go", "", false},
	} {
		prefix, _, ok := x.matchPrefix(c.path)
		if ok != c.ok || prefix != c.prefix {
			t.Errorf("%s: %q %v, want %q %v", c.path, prefix, ok, c.prefix, c.ok)
		}
	}
	if _, err := newExcluder([]string{"/"}); !errors.Is(err, chunkstore.ErrInvalid) {
		t.Errorf("empty pattern: %v", err)
	}
}

func TestDevNumbers(t *testing.T) {
	for _, d := range [][2]uint32{{1, 3}, {259, 70000}, {4095, 255}, {4096, 256}, {1 << 31, 1<<20 + 5}} {
		dev := mkdev(d[0], d[1])
		if dev != unix.Mkdev(d[0], d[1]) || devMajor(dev) != d[0] || devMinor(dev) != d[1] {
			t.Errorf("%d:%d: %x -> %d:%d", d[0], d[1], dev, devMajor(dev), devMinor(dev))
		}
	}
}
