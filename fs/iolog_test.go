package fs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// I/O errors are logged, at most ioLogBurst lines a second, with a count of
// the rest.
func TestIOLog(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	l := &ioLog{now: func() time.Time { return now }}
	var lines []string
	logf := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	for i := range 15 {
		l.log(logf, fmt.Errorf("read blob %d from pack p: %w", i, errors.New("backend unavailable")))
	}
	if len(lines) != ioLogBurst || !strings.Contains(lines[0], "I/O error") || !strings.Contains(lines[0], "read blob 0 from pack p") {
		t.Fatalf("first second: %d lines: %q", len(lines), lines)
	}
	now = t0.Add(time.Second)
	l.log(logf, errors.New("later"))
	if len(lines) != ioLogBurst+2 || lines[ioLogBurst] != "cairn: 5 more I/O errors not logged" || !strings.Contains(lines[ioLogBurst+1], "later") {
		t.Fatalf("next second: %q", lines[ioLogBurst:])
	}
}
