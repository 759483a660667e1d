package tarfmt

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxFragments bounds a sparse map (archive/tar allows about as many).
const maxFragments = 1 << 20

// sparseMap returns the map of hdr when it is a GNU sparse entry, in the
// formats tar.Reader reads (and with the same detection rules); nil for
// any other entry. blocks are the header blocks tar.Reader read for the
// entry, from its first header block on. A map that contradicts the
// archive is an error; a map this function cannot find (it found tar
// headers it does not understand) leaves the entry to tar.Reader, which
// reads holes as zeros: correct, only slower.
func sparseMap(hdr *tar.Header, blocks []byte) (*sparseEntry, error) {
	major, minor := hdr.PAXRecords["GNU.sparse.major"], hdr.PAXRecords["GNU.sparse.minor"]
	var kind string
	switch {
	case hdr.Typeflag == tar.TypeGNUSparse:
		kind = "old GNU"
	case major == "0" && (minor == "0" || minor == "1"):
		kind = "0.x"
	case major == "1" && minor == "0":
		kind = "1.0"
	case major != "" || minor != "":
		return nil, nil // unknown version: tar.Reader reads it as a plain file
	case hdr.PAXRecords["GNU.sparse.map"] != "":
		kind = "0.x"
	default:
		return nil, nil
	}
	main, rest, ok := mainHeader(blocks)
	if !ok {
		return nil, nil
	}
	var physical int64
	if s, ok := hdr.PAXRecords["size"]; ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad PAX size %q", s)
		}
		physical = n
	} else if physical, ok = parseNumeric(main[sizeField.off : sizeField.off+sizeField.len]); !ok || physical < 0 {
		return nil, errors.New("bad size field")
	}
	var nums []int64
	var err error
	switch kind {
	case "1.0":
		nums, err = map1x0(rest)
		physical -= int64(len(rest)) // the map was read from the entry's data
	case "0.x":
		nums, err = map0x(hdr.PAXRecords["GNU.sparse.map"])
	case "old GNU":
		nums, err = mapOldGNU(main, rest)
	}
	if err != nil {
		return nil, fmt.Errorf("GNU sparse %s map: %v", kind, err)
	}
	sp := &sparseEntry{size: hdr.Size}
	var pos int64
	for i := 0; i+1 < len(nums); i += 2 {
		f := Fragment{Offset: nums[i], Length: nums[i+1]}
		if f.Offset < pos || f.Length < 0 || f.Length > math.MaxInt64-f.Offset || f.End() > hdr.Size {
			return nil, fmt.Errorf("GNU sparse %s map: fragment [%d, +%d) is out of order or past the file's %d bytes", kind, f.Offset, f.Length, hdr.Size)
		}
		if f.Length > 0 {
			sp.frags = append(sp.frags, f)
			sp.data += f.Length
			pos = f.End()
		}
	}
	if sp.data != physical {
		return nil, fmt.Errorf("GNU sparse %s map covers %d bytes of data, the archive holds %d", kind, sp.data, physical)
	}
	sp.left = sp.data
	return sp, nil
}

// mainHeader finds the entry's own header block among the blocks Next
// read: after any PAX ('x', 'g') and GNU long-name ('L', 'K') headers and
// their data. rest is what follows it.
func mainHeader(blocks []byte) (main, rest []byte, ok bool) {
	for len(blocks) >= blockSize {
		b := blocks[:blockSize]
		switch b[typeField.off] {
		case tar.TypeXHeader, tar.TypeXGlobalHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
			n, ok := parseNumeric(b[sizeField.off : sizeField.off+sizeField.len])
			if !ok || n < 0 || n > int64(len(blocks)) {
				return nil, nil, false
			}
			skip := blockSize + n + padding(n)
			if skip > int64(len(blocks)) {
				return nil, nil, false
			}
			blocks = blocks[skip:]
		default:
			return b, blocks[blockSize:], true
		}
	}
	return nil, nil, false
}

// map1x0 parses a format 1.0 map: decimal numbers, one per line: the count,
// then offset and length pairs; NUL-padded to a block.
func map1x0(data []byte) ([]int64, error) {
	lines := bytes.Split(data, []byte{'\n'})
	num := func(i int) (int64, error) {
		if i >= len(lines)-1 { // the last piece has no newline after it
			return 0, errors.New("truncated")
		}
		n, err := strconv.ParseInt(string(lines[i]), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bad number %q", lines[i])
		}
		return n, nil
	}
	count, err := num(0)
	if err != nil {
		return nil, err
	}
	if count > maxFragments {
		return nil, fmt.Errorf("%d fragments", count)
	}
	out := make([]int64, 2*count)
	for i := range out {
		if out[i], err = num(i + 1); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// map0x parses the GNU.sparse.map record of formats 0.1 (and 0.0, which
// tar.Reader turns into 0.1): "offset,length,offset,length...".
func map0x(s string) ([]int64, error) {
	parts := strings.Split(s, ",")
	if len(parts)%2 != 0 || len(parts) > 2*maxFragments {
		return nil, fmt.Errorf("%d numbers", len(parts))
	}
	out := make([]int64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad number %q", p)
		}
		out[i] = n
	}
	return out, nil
}

// mapOldGNU parses the old GNU format's map: 4 entries in the header block
// (at 386, then the isextended flag at 482), 21 in each extension block
// that follows (flag at 504). An entry is a 12-byte offset and a 12-byte
// length; one whose offset starts with NUL ends the list.
func mapOldGNU(main, ext []byte) ([]int64, error) {
	var out []int64
	area, entries, flag := main[386:], 4, main[482]
	for {
		for i := range entries {
			e := area[i*24 : i*24+24]
			if e[0] == 0 {
				break
			}
			off, ok1 := parseNumeric(e[:12])
			n, ok2 := parseNumeric(e[12:])
			if !ok1 || !ok2 {
				return nil, errors.New("bad number")
			}
			out = append(out, off, n)
			if len(out) > 2*maxFragments {
				return nil, errors.New("too many fragments")
			}
		}
		if flag == 0 {
			return out, nil
		}
		if len(ext) < blockSize {
			return nil, errors.New("missing extension block")
		}
		area, entries, flag, ext = ext, 21, ext[504], ext[blockSize:]
	}
}

// parseNumeric parses a numeric header field: octal digits (space or NUL
// terminated), or GNU base-256 when the first byte has its high bit set.
func parseNumeric(b []byte) (int64, bool) {
	if len(b) > 0 && b[0]&0x80 != 0 {
		if b[0]&0x40 != 0 { // negative
			return 0, false
		}
		var n int64
		for i, c := range b {
			if i == 0 {
				c &= 0x7f
			}
			if n > math.MaxInt64>>8 {
				return 0, false
			}
			n = n<<8 | int64(c)
		}
		return n, true
	}
	s := strings.Trim(string(b), " \x00")
	if s == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 8, 64)
	return n, err == nil
}
