package fusetrace

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// format is what this package needs of a tracepoint's format file: where
// its fields are in the record, and the names it prints for opcodes.
type format struct {
	fields map[string]field
	names  map[uint32]string // from __print_symbolic, if any
}

type field struct{ offset, size int }

var (
	fieldRE  = regexp.MustCompile(`field:[^;]*?([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?;\s*offset:(\d+);\s*size:(\d+);`)
	symbolRE = regexp.MustCompile(`\{\s*(\d+)\s*,\s*"([A-Za-z0-9_]+)"\s*\}`)
)

// parseFormat reads a tracepoint format file
// (/sys/kernel/tracing/events/GROUP/NAME/format).
func parseFormat(text string) (format, error) {
	f := format{fields: map[string]field{}, names: map[uint32]string{}}
	for _, m := range fieldRE.FindAllStringSubmatch(text, -1) {
		off, err1 := strconv.Atoi(m[3])
		size, err2 := strconv.Atoi(m[4])
		if err1 != nil || err2 != nil {
			return format{}, fmt.Errorf("tracepoint format: bad field %q", m[0])
		}
		f.fields[m[1]] = field{off, size}
	}
	if len(f.fields) == 0 {
		return format{}, fmt.Errorf("tracepoint format: no fields in %q", firstLine(text))
	}
	if i := strings.Index(text, "print fmt:"); i >= 0 {
		for _, m := range symbolRE.FindAllStringSubmatch(text[i:], -1) {
			if n, err := strconv.ParseUint(m[1], 10, 32); err == nil {
				f.names[uint32(n)] = m[2]
			}
		}
	}
	return f, nil
}

// u32 returns the offset of a 4-byte field.
func (f format) u32(name string) (int16, error) {
	fl, ok := f.fields[name]
	if !ok {
		return 0, fmt.Errorf("tracepoint format: no field %q", name)
	}
	if fl.size != 4 || fl.offset%4 != 0 || fl.offset > 1<<12 {
		return 0, fmt.Errorf("tracepoint format: field %q is %d bytes at %d, want 4 aligned", name, fl.size, fl.offset)
	}
	return int16(fl.offset), nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
