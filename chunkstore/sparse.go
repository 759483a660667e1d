package chunkstore

import (
	"errors"
	"io"
	"syscall"
)

// DataRanges lists where file f holds data within its first size bytes,
// with SEEK_DATA and SEEK_HOLE, for PutSparseFile: holes are stored as
// holes. Bytes past the file's end read as zeros and are a hole. A file
// system (or an OS) without SEEK_DATA gets one range: the whole file.
func DataRanges(f io.Seeker, size uint64) ([]Range, error) {
	if !haveSeekData {
		return []Range{{Off: 0, Len: size}}, nil
	}
	var out []Range
	for off := int64(0); off < int64(size); {
		d, err := f.Seek(off, seekData)
		switch {
		case errors.Is(err, syscall.ENXIO): // no data at or after off
			return out, nil
		case errors.Is(err, syscall.EINVAL) && off == 0:
			return []Range{{Off: 0, Len: size}}, nil
		case err != nil:
			return nil, err
		case d >= int64(size):
			return out, nil
		}
		h, err := f.Seek(d, seekHole)
		if err != nil {
			return nil, err
		}
		h = min(h, int64(size))
		out = append(out, Range{Off: uint64(d), Len: uint64(h - d)})
		off = h
	}
	return out, nil
}
