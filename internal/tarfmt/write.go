package tarfmt

import (
	"archive/tar"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

const blockSize = 512

// Fragment is a run of data in a sparse file: Length bytes from Offset.
// Everything outside a file's fragments is a hole (reads as zeros).
type Fragment struct{ Offset, Length int64 }

// End is the offset just past the fragment.
func (f Fragment) End() int64 { return f.Offset + f.Length }

// PAX keys this package writes itself (and so ignores in Header.PAXRecords).
const (
	paxSparsePrefix = "GNU.sparse."
	paxSchilyXattr  = "SCHILY.xattr."
)

var reservedPAX = map[string]bool{
	"path": true, "linkpath": true, "size": true, "uid": true, "gid": true,
	"uname": true, "gname": true, "mtime": true, "atime": true, "ctime": true,
}

// WriteSparse writes one regular file to w as a GNU sparse 1.0 entry: hdr
// describes the file (Name, Mode, Uid, Gid, Uname, Gname, ModTime,
// AccessTime, ChangeTime, PAXRecords such as SCHILY.xattr.*; Size is the
// file's logical size), data lists its data fragments (sorted, not
// overlapping, within Size; empty ones are ignored; each is widened to
// 512-byte boundaries) and r holds its content: only the fragments are
// read. w must be at a block boundary of a
// tar stream: after tar.Writer.Flush, or the previous WriteSparse. The
// entry ends at a block boundary too, so a tar.Writer may go on writing.
func WriteSparse(w io.Writer, hdr *tar.Header, data []Fragment, r io.ReaderAt) error {
	if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != 0 {
		return fmt.Errorf("tarfmt: sparse entry %q has type %q, want a regular file", hdr.Name, hdr.Typeflag)
	}
	if hdr.Size < 0 {
		return fmt.Errorf("tarfmt: sparse entry %q has negative size %d", hdr.Name, hdr.Size)
	}
	// GNU tar stores every fragment in whole blocks (it finds fragments
	// with SEEK_DATA, so only the last one ends off a block boundary) and
	// reads them back that way, while archive/tar reads the fragments as
	// one run of bytes. Fragments widened to block boundaries (within the
	// file) satisfy both; the bytes they gain are read from r.
	frags := make([]Fragment, 0, len(data)+1)
	var pos int64
	for _, f := range data {
		if f.Length == 0 {
			continue
		}
		if f.Offset < pos || f.Length < 0 || f.End() > hdr.Size || f.End() < f.Offset {
			return fmt.Errorf("tarfmt: sparse entry %q: fragment [%d, +%d) is out of order or past its %d bytes", hdr.Name, f.Offset, f.Length, hdr.Size)
		}
		pos = f.End()
		start, end := f.Offset&^(blockSize-1), min(hdr.Size, f.End()+padding(f.End()))
		if n := len(frags); n > 0 && frags[n-1].End() >= start {
			frags[n-1].Length = end - frags[n-1].Offset
			continue
		}
		frags = append(frags, Fragment{Offset: start, Length: end - start})
	}
	var dataLen int64
	for _, f := range frags {
		dataLen += f.Length
	}
	pos = 0
	if n := len(frags); n > 0 {
		pos = frags[n-1].End()
	}
	// A file that ends in a hole gets a last, empty fragment at its end:
	// GNU tar truncates the file there, which gives it its size.
	if pos < hdr.Size || len(frags) == 0 {
		frags = append(frags, Fragment{Offset: hdr.Size})
	}
	var m strings.Builder
	m.WriteString(strconv.Itoa(len(frags)) + "\n")
	for _, f := range frags {
		fmt.Fprintf(&m, "%d\n%d\n", f.Offset, f.Length)
	}
	sparseMap := padBlock([]byte(m.String()))
	physical := int64(len(sparseMap)) + dataLen

	recs := map[string]string{
		"GNU.sparse.major":    "1",
		"GNU.sparse.minor":    "0",
		"GNU.sparse.name":     hdr.Name,
		"GNU.sparse.realsize": strconv.FormatInt(hdr.Size, 10),
		"mtime":               paxTime(hdr.ModTime),
	}
	if !hdr.AccessTime.IsZero() {
		recs["atime"] = paxTime(hdr.AccessTime)
	}
	if !hdr.ChangeTime.IsZero() {
		recs["ctime"] = paxTime(hdr.ChangeTime)
	}
	for k, v := range hdr.PAXRecords {
		if !reservedPAX[k] && !strings.HasPrefix(k, paxSparsePrefix) {
			recs[k] = v
		}
	}
	var b block
	b.setString(nameField, "./GNUSparseFile.0/"+path.Base(hdr.Name))
	b.setOctal(modeField, hdr.Mode&0o7777)
	for _, f := range []struct {
		field
		key string
		v   int64
	}{{uidField, "uid", int64(hdr.Uid)}, {gidField, "gid", int64(hdr.Gid)}, {sizeField, "size", physical}} {
		if !b.setOctal(f.field, f.v) {
			recs[f.key] = strconv.FormatInt(f.v, 10)
		}
	}
	b.setOctal(mtimeField, max(0, min(hdr.ModTime.Unix(), 0o77777777777)))
	b[typeField.off] = tar.TypeReg
	for _, f := range []struct {
		field
		key, v string
	}{{unameField, "uname", hdr.Uname}, {gnameField, "gname", hdr.Gname}} {
		if f.v != "" && !b.setString(f.field, f.v) {
			recs[f.key] = f.v
		}
	}
	b.finish()

	ext, err := paxHeader(hdr.Name, recs)
	if err != nil {
		return err
	}
	for _, p := range [][]byte{ext, b[:], sparseMap} {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	buf := make([]byte, 1<<20)
	for _, f := range frags {
		if f.Length == 0 {
			continue
		}
		n, err := io.CopyBuffer(w, io.NewSectionReader(r, f.Offset, f.Length), buf)
		if err == nil && n != f.Length {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return fmt.Errorf("tarfmt: sparse entry %q: data at %d: %w", hdr.Name, f.Offset, err)
		}
	}
	_, err = w.Write(make([]byte, padding(dataLen)))
	return err
}

// paxHeader returns a PAX extended header ('x') holding recs, with its
// data, block-padded.
func paxHeader(name string, recs map[string]string) ([]byte, error) {
	var data []byte
	for _, k := range slices.Sorted(maps.Keys(recs)) {
		rec, err := paxRecord(k, recs[k])
		if err != nil {
			return nil, fmt.Errorf("tarfmt: entry %q: %w", name, err)
		}
		data = append(data, rec...)
	}
	var b block
	b.setString(nameField, "./PaxHeaders/"+path.Base(name))
	b.setOctal(modeField, 0o644)
	b.setOctal(uidField, 0)
	b.setOctal(gidField, 0)
	if !b.setOctal(sizeField, int64(len(data))) {
		return nil, fmt.Errorf("tarfmt: entry %q: PAX header of %d bytes is too large", name, len(data))
	}
	b.setOctal(mtimeField, 0)
	b[typeField.off] = tar.TypeXHeader
	b.finish()
	return append(b[:], padBlock(data)...), nil
}

// paxRecord formats one PAX record: "LEN KEY=VALUE\n", where LEN counts
// the whole record, its own digits included. Values may hold any bytes but
// NUL in names and paths; keys no '=' and no NUL.
func paxRecord(k, v string) (string, error) {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return "", fmt.Errorf("PAX key %q: empty, or contains '=' or NUL", k)
	}
	if (k == "GNU.sparse.name" || k == "uname" || k == "gname") && strings.Contains(v, "\x00") {
		return "", fmt.Errorf("PAX record %s contains NUL", k)
	}
	size := len(k) + len(v) + 3 // ' ', '=', '\n'
	size += len(strconv.Itoa(size))
	rec := strconv.Itoa(size) + " " + k + "=" + v + "\n"
	if len(rec) != size { // the length's digits made it one digit longer
		rec = strconv.Itoa(len(rec)) + " " + k + "=" + v + "\n"
	}
	return rec, nil
}

// paxTime formats t for a PAX time record: seconds, with nanoseconds
// when there are any (trailing zeros trimmed); negative times as tar does.
func paxTime(t time.Time) string {
	secs, nsecs := t.Unix(), int64(t.Nanosecond())
	if nsecs == 0 {
		return strconv.FormatInt(secs, 10)
	}
	sign := ""
	if secs < 0 {
		sign, secs, nsecs = "-", -(secs + 1), 1e9-nsecs
	}
	return strings.TrimRight(fmt.Sprintf("%s%d.%09d", sign, secs, nsecs), "0")
}

// block is one 512-byte ustar header block.
type block [blockSize]byte

type field struct{ off, len int }

var (
	nameField  = field{0, 100}
	modeField  = field{100, 8}
	uidField   = field{108, 8}
	gidField   = field{116, 8}
	sizeField  = field{124, 12}
	mtimeField = field{136, 12}
	sumField   = field{148, 8}
	typeField  = field{156, 1}
	unameField = field{265, 32}
	gnameField = field{297, 32}
)

// setOctal writes v as NUL-terminated octal digits, reporting false (and
// writing 0) when v does not fit.
func (b *block) setOctal(f field, v int64) bool {
	ok := v >= 0 && v < 1<<(3*(f.len-1))
	if !ok {
		v = 0
	}
	copy(b[f.off:], fmt.Sprintf("%0*o", f.len-1, v))
	b[f.off+f.len-1] = 0
	return ok
}

// setString writes s, truncated to the field, reporting whether it fit.
func (b *block) setString(f field, s string) bool {
	copy(b[f.off:f.off+f.len], s)
	return len(s) <= f.len
}

// finish sets the ustar magic and version and the checksum.
func (b *block) finish() {
	copy(b[257:], "ustar\x0000")
	copy(b[sumField.off:], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[sumField.off:], fmt.Sprintf("%06o\x00 ", sum))
}

func padding(n int64) int64 { return -n & (blockSize - 1) }

func padBlock(p []byte) []byte { return append(p, make([]byte, padding(int64(len(p))))...) }
