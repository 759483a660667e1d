package cgroupbpf

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// EventReader reads the programs' decisions from the ring buffer.
type EventReader struct {
	p *Programs
	r *ringbuf.Reader
}

// Events opens the reader of the event ring buffer. There is one ring
// buffer and so one reader at a time: a second call before the first
// reader's Close fails.
func (p *Programs) Events() (*EventReader, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.reader != nil {
		return nil, fmt.Errorf("cgroupbpf: the event reader is already open")
	}
	r, err := ringbuf.NewReader(p.m(mapEvents))
	if err != nil {
		return nil, fmt.Errorf("cgroupbpf: open event reader: %w", err)
	}
	p.reader = &EventReader{p: p, r: r}
	return p.reader, nil
}

// Read blocks until an event arrives, the deadline passes (an error
// matching os.ErrDeadlineExceeded) or the reader is closed (ErrClosed).
func (er *EventReader) Read() (Event, error) {
	for {
		rec, err := er.r.Read()
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return Event{}, ErrClosed
			}
			return Event{}, fmt.Errorf("cgroupbpf: read event: %w", err)
		}
		raw, ok := decodeEvent(rec.RawSample)
		if !ok {
			continue
		}
		raw.ev.Time = wallClock()(raw.boot)
		return raw.ev, nil
	}
}

// SetDeadline makes Read return once t has passed; the zero time waits
// forever.
func (er *EventReader) SetDeadline(t time.Time) { er.r.SetDeadline(t) }

// Close stops the reader; a blocked Read returns ErrClosed. Programs.Close
// closes it too.
func (er *EventReader) Close() error {
	er.p.mu.Lock()
	if er.p.reader == er {
		er.p.reader = nil
	}
	er.p.mu.Unlock()
	return er.r.Close()
}
