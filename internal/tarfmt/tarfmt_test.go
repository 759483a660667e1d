package tarfmt

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sparseFile is a test file: its size and data fragments, whose bytes are
// a function of the offset.
type sparseFile struct {
	name  string
	size  int64
	frags []Fragment
}

func (f sparseFile) content() []byte {
	b := make([]byte, f.size)
	for _, fr := range f.frags {
		for i := fr.Offset; i < fr.End(); i++ {
			b[i] = byte(i*7 + 1)
		}
	}
	return b
}

// ReadAt serves the content without materialising it.
func (f sparseFile) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	for _, fr := range f.frags {
		for i := max(fr.Offset, off); i < min(fr.End(), off+int64(len(p))); i++ {
			p[i-off] = byte(i*7 + 1)
		}
	}
	if off+int64(len(p)) > f.size {
		return int(max(0, f.size-off)), io.EOF
	}
	return len(p), nil
}

var testFiles = []sparseFile{
	{"a/two-writes", 1 << 40, []Fragment{{1 << 20, 5}, {700 << 30, 4096}}},
	{"data-at-end", 3 << 20, []Fragment{{0, 10000}, {3<<20 - 700, 700}}},
	{"all-hole", 1 << 30, nil},
	{"many", 50 << 20, manyFrags(60)}, // more than fit in one map block
	{"dense-sparse", 9000, []Fragment{{0, 9000}}},
}

func manyFrags(n int) []Fragment {
	var out []Fragment
	for i := range n {
		out = append(out, Fragment{int64(i) << 19, 100 + int64(i)})
	}
	return out
}

// writeArchive writes files with WriteSparse between ordinary entries of a
// tar.Writer (each followed by a small regular file).
func writeArchive(t testing.TB, files []sparseFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Date(2021, 3, 4, 5, 6, 7, 123456789, time.UTC)
	for i, f := range files {
		if err := tw.Flush(); err != nil {
			t.Fatal(err)
		}
		hdr := &tar.Header{Name: "./" + f.name, Mode: 0o4751, Uid: 1234, Gid: 3000000, Size: f.size, ModTime: mtime,
			AccessTime: mtime.Add(time.Second), ChangeTime: mtime.Add(2 * time.Second),
			PAXRecords: map[string]string{"SCHILY.xattr.user.bin": "\x00\n=\xff", "path": "ignored"}}
		if err := WriteSparse(&buf, hdr, f.frags, f); err != nil {
			t.Fatal(err)
		}
		small := fmt.Sprintf("after %d\n", i)
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("./small%d", i), Mode: 0o644, Size: int64(len(small)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, small)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriteSparse_ReadBack(t *testing.T) {
	data := writeArchive(t, testFiles)
	if len(data) > 1<<20 {
		t.Fatalf("archive of sparse files is %d bytes", len(data))
	}
	check := func(t *testing.T, next func() (*tar.Header, error), read func(*tar.Header) []byte) {
		for i, f := range testFiles {
			hdr, err := next()
			if err != nil {
				t.Fatal(err)
			}
			if hdr.Name != "./"+f.name || hdr.Size != f.size || hdr.Mode != 0o4751 || hdr.Uid != 1234 || hdr.Gid != 3000000 ||
				hdr.ModTime.Nanosecond() != 123456789 || hdr.ChangeTime.Sub(hdr.ModTime) != 2*time.Second ||
				hdr.PAXRecords["SCHILY.xattr.user.bin"] != "\x00\n=\xff" {
				t.Fatalf("header of %s: %+v", f.name, hdr)
			}
			if got := read(hdr); got != nil && !bytes.Equal(got, f.content()) {
				t.Fatalf("%s: content differs", f.name)
			}
			hdr, err = next()
			if err != nil || hdr.Name != fmt.Sprintf("./small%d", i) {
				t.Fatalf("entry after %s: %v %v", f.name, hdr, err)
			}
			if got := read(hdr); got != nil && string(got) != fmt.Sprintf("after %d\n", i) {
				t.Fatalf("small%d: %q", i, got)
			}
		}
		if _, err := next(); err != io.EOF {
			t.Fatalf("after the last entry: %v", err)
		}
	}
	t.Run("ArchiveTar", func(t *testing.T) { // the standard library's reader validates the format
		tr := tar.NewReader(bytes.NewReader(data))
		check(t, tr.Next, func(h *tar.Header) []byte {
			if h.Size > 100<<20 {
				return nil // would read a TiB of zeros
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		})
	})
	t.Run("Reader", func(t *testing.T) {
		r := NewReader(bytes.NewReader(data))
		check(t, r.Next, func(h *tar.Header) []byte {
			frags, ok := r.Fragments()
			if strings.HasPrefix(h.Name, "./small") {
				if ok {
					t.Fatalf("%s: dense entry has fragments", h.Name)
				}
				b, _ := io.ReadAll(r)
				return b
			}
			f := testFiles[slices.IndexFunc(testFiles, func(f sparseFile) bool { return "./"+f.name == h.Name })]
			if !ok || !slices.Equal(frags, widen(f.frags, f.size)) {
				t.Fatalf("%s: fragments %v %v, want %v", h.Name, frags, ok, f.frags)
			}
			if h.Size > 100<<20 {
				return readFragments(t, r, frags, f)
			}
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			return b
		})
	})
}

// widen rounds fragments out to 512-byte blocks and merges them, as
// WriteSparse does.
func widen(frags []Fragment, size int64) []Fragment {
	var out []Fragment
	for _, f := range nonEmpty(frags) {
		p := Fragment{Offset: f.Offset &^ 511}
		p.Length = min(size, (f.End()+511)&^511) - p.Offset
		if n := len(out); n > 0 && out[n-1].End() >= p.Offset {
			out[n-1].Length = p.End() - out[n-1].Offset
			continue
		}
		out = append(out, p)
	}
	return out
}

func nonEmpty(frags []Fragment) []Fragment {
	var out []Fragment
	for _, f := range frags {
		if f.Length > 0 {
			out = append(out, f)
		}
	}
	return out
}

// readFragments reads only the fragments through ReadAt and checks them
// against the test pattern; nil means they matched.
func readFragments(t *testing.T, r *Reader, frags []Fragment, file sparseFile) []byte {
	t.Helper()
	for _, f := range frags {
		b := make([]byte, f.Length)
		if n, err := r.ReadAt(b, f.Offset); n != len(b) || (err != nil && err != io.EOF) {
			t.Fatalf("ReadAt %d: %d, %v", f.Offset, n, err)
		}
		want := make([]byte, f.Length)
		file.ReadAt(want, f.Offset)
		if !bytes.Equal(b, want) {
			t.Fatalf("fragment at %d differs", f.Offset)
		}
	}
	if _, err := r.ReadAt(make([]byte, 1), 0); err == nil && len(frags) > 0 {
		t.Fatal("ReadAt backwards succeeded")
	}
	return nil
}

func needTar(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tar")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs GNU tar, and CI must not skip it")
		}
		t.Skip("needs GNU tar")
	}
	if out, _ := exec.Command(p, "--version").Output(); !bytes.Contains(out, []byte("GNU tar")) {
		t.Skip("tar is not GNU tar")
	}
	return p
}

// GNU tar extracts WriteSparse's entries with their holes.
func TestWriteSparse_GNUTar(t *testing.T) {
	tarBin := needTar(t)
	dir := t.TempDir()
	archive := filepath.Join(dir, "a.tar")
	if err := os.WriteFile(archive, writeArchive(t, testFiles), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	if b, err := exec.Command(tarBin, "--xattrs", "--xattrs-include=*", "-xpf", archive, "-C", out).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, b)
	}
	for _, f := range testFiles {
		p := filepath.Join(out, f.name)
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != f.size || st.Mode&0o7777 != 0o4751 || st.Mtim.Nsec != 123456789 {
			t.Fatalf("%s: size %d mode %o mtime %v", f.name, st.Size, st.Mode, st.Mtim)
		}
		if st.Blocks*512 > 4<<20 {
			t.Fatalf("%s: %d bytes allocated: the holes were written", f.name, st.Blocks*512)
		}
		if got, want := dataFragments(t, p), pages(f.frags, f.size); !slices.Equal(got, want) {
			t.Errorf("%s: extracted with data at %v, want %v", f.name, got, f.frags)
		}
		if f.size < 100<<20 {
			b, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(b, f.content()) {
				t.Fatalf("%s: content differs (%v)", f.name, err)
			}
		}
		v := make([]byte, 16)
		if n, err := unix.Getxattr(p, "user.bin", v); err != nil || string(v[:n]) != "\x00\n=\xff" {
			t.Errorf("%s: xattr %q %v", f.name, v[:max(n, 0)], err)
		}
	}
}

// dataFragments lists a file's data as lseek(SEEK_DATA/SEEK_HOLE) reports
// it, at page granularity.
func dataFragments(t *testing.T, p string) []Fragment {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	var out []Fragment
	for off := int64(0); off < fi.Size(); {
		d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err != nil {
			break
		}
		h, err := unix.Seek(int(f.Fd()), d, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Fragment{d, h - d})
		off = h
	}
	return out
}

// pages rounds fragments out to 4 KiB pages (within size) and merges them,
// as a file system stores them.
func pages(frags []Fragment, size int64) []Fragment {
	var out []Fragment
	for _, f := range nonEmpty(frags) {
		p := Fragment{Offset: f.Offset &^ 4095}
		p.Length = min(size, (f.End()+4095)&^4095) - p.Offset
		if n := len(out); n > 0 && out[n-1].End() >= p.Offset {
			out[n-1].Length = p.End() - out[n-1].Offset
			continue
		}
		out = append(out, p)
	}
	return out
}

// Reader reads the sparse formats GNU tar writes, skipping holes, and keeps
// its place in the stream for the entries after them.
func TestReader_GNUTarFormats(t *testing.T) {
	tarBin := needTar(t)
	src := t.TempDir()
	files := []sparseFile{
		{"big", 1 << 40, []Fragment{{4096, 4096}, {600 << 30, 8192}}},
		{"tail", 5 << 20, []Fragment{{0, 4096}, {5<<20 - 4096, 4096}}},
		{"spread", 40 << 20, pageFrags(30)}, // more than the 4 + 21 entries of old GNU blocks
	}
	for _, f := range files {
		fh, err := os.Create(filepath.Join(src, f.name))
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range f.frags {
			b := make([]byte, fr.Length)
			f.ReadAt(b, fr.Offset)
			fh.WriteAt(b, fr.Offset)
		}
		fh.Truncate(f.size)
		fh.Close()
	}
	os.WriteFile(filepath.Join(src, "plain"), []byte("plain file\n"), 0o644)
	os.WriteFile(filepath.Join(src, "plain2"), []byte("plain file\n"), 0o644)
	for _, format := range [][]string{
		{"--format=posix", "--sparse-version=1.0"},
		{"--format=posix", "--sparse-version=0.1"},
		{"--format=posix", "--sparse-version=0.0"},
		{"--format=gnu", "--sparse"},
	} {
		t.Run(strings.Join(format, ""), func(t *testing.T) {
			archive := filepath.Join(t.TempDir(), "a.tar")
			args := append(append([]string{}, format...), "-cf", archive, "-C", src, "big", "plain", "tail", "spread", "plain2")
			if b, err := exec.Command(tarBin, args...).CombinedOutput(); err != nil {
				t.Fatalf("tar %v: %v\n%s", args, err, b)
			}
			fh, err := os.Open(archive)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			r := NewReader(fh)
			var names []string
			for {
				hdr, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, hdr.Name)
				if strings.HasPrefix(hdr.Name, "plain") {
					if b, _ := io.ReadAll(r); string(b) != "plain file\n" {
						t.Fatalf("plain: %q", b)
					}
					continue
				}
				f := files[slices.IndexFunc(files, func(f sparseFile) bool { return f.name == hdr.Name })]
				frags, ok := r.Fragments()
				if !ok || hdr.Size != f.size {
					t.Fatalf("%s: size %d, fragments %v %v", hdr.Name, hdr.Size, frags, ok)
				}
				if !slices.Equal(frags, f.frags) {
					t.Fatalf("%s: fragments %v, want %v", hdr.Name, frags, f.frags)
				}
				if hdr.Name == "spread" {
					continue // leave it unread: Next must skip it
				}
				readFragments(t, r, frags, f)
			}
			if want := []string{"big", "plain", "tail", "spread", "plain2"}; !slices.Equal(names, want) {
				t.Fatalf("entries %v, want %v", names, want)
			}
		})
	}
}

func pageFrags(n int) []Fragment {
	var out []Fragment
	for i := range n {
		out = append(out, Fragment{int64(i) << 20, 4096})
	}
	return out
}

// Inconsistent sparse maps and truncated archives are errors, not wrong
// bytes.
func TestReader_Corrupt(t *testing.T) {
	good := writeArchive(t, testFiles[1:2])
	t.Run("Truncated", func(t *testing.T) {
		// In the PAX header, the sparse map, the data, the next header.
		for _, cut := range []int{700, 1536 + 100, 2048 + 5000, 14336 + 100} {
			r := NewReader(bytes.NewReader(good[:cut]))
			var err error
			for err == nil {
				if _, err = r.Next(); err == nil {
					_, err = io.Copy(io.Discard, r)
				}
			}
			if err == io.EOF {
				t.Fatalf("cut at %d: no error", cut)
			}
		}
	})
	t.Run("MapSize", func(t *testing.T) {
		bad := bytes.Replace(good, []byte("\n10240\n"), []byte("\n10241\n"), 1)
		if bytes.Equal(bad, good) {
			t.Fatal("map not found")
		}
		_, err := NewReader(bytes.NewReader(bad)).Next()
		if err == nil || !errors.Is(err, tar.ErrHeader) || !strings.Contains(err.Error(), "covers") {
			t.Fatalf("err = %v", err)
		}
	})
}

// FuzzReader: whatever the input, Reader never panics, and reads the same
// content as archive/tar.
func FuzzReader(f *testing.F) {
	f.Add(writeArchive(f, testFiles[1:2]))
	f.Add(writeArchive(f, []sparseFile{{"x", 2000, []Fragment{{10, 20}, {1000, 5}}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		want := sha256.New()
		tr := tar.NewReader(bytes.NewReader(data))
		var wantErr error
		var wantNames []string
		for {
			hdr, err := tr.Next()
			if err != nil {
				wantErr = err
				break
			}
			if hdr.Size > 1<<24 {
				return // too slow to read densely
			}
			wantNames = append(wantNames, hdr.Name)
			if _, err := io.Copy(want, tr); err != nil {
				wantErr = err
				break
			}
		}
		got := sha256.New()
		r := NewReader(bytes.NewReader(data))
		var gotNames []string
		var gotErr error
		for {
			hdr, err := r.Next()
			if err != nil {
				gotErr = err
				break
			}
			if hdr.Size > 1<<24 {
				return // archive/tar rejected the archive before this entry
			}
			gotNames = append(gotNames, hdr.Name)
			if _, err := io.Copy(got, r); err != nil {
				gotErr = err
				break
			}
		}
		if wantErr == io.EOF && gotErr == io.EOF && !bytes.Equal(want.Sum(nil), got.Sum(nil)) {
			t.Fatalf("content differs from archive/tar's (entries %q)", gotNames)
		}
		if gotErr == io.EOF && wantErr == io.EOF && !slices.Equal(gotNames, wantNames) {
			t.Fatalf("entries %q, archive/tar: %q", gotNames, wantNames)
		}
		if (gotErr == io.EOF) != (wantErr == io.EOF) {
			t.Fatalf("error %v, archive/tar's: %v", gotErr, wantErr)
		}
	})
}
