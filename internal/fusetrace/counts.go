package fusetrace

// Counts are one connection's requests since the counter was opened.
type Counts struct {
	// Ops counts requests sent, by opcode name (FUSE_LOOKUP...).
	Ops map[string]uint64 `json:"ops"`
	// Replies counts requests ended (replied to or aborted).
	Replies uint64 `json:"replies"`
}

// Requests is the number of requests sent, all opcodes.
func (c Counts) Requests() uint64 {
	var n uint64
	for _, v := range c.Ops {
		n += v
	}
	return n
}

// Sub returns c - old: the requests between two readings.
func (c Counts) Sub(old Counts) Counts {
	d := Counts{Ops: map[string]uint64{}, Replies: c.Replies - old.Replies}
	for op, v := range c.Ops {
		if v > old.Ops[op] {
			d.Ops[op] = v - old.Ops[op]
		}
	}
	return d
}
