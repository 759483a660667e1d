package cdc

import "fmt"

// Mask bit positions. Gear-hash bit k depends on the last k+1 bytes only, so
// the one-bits of a mask are spread evenly over bits maskLo..maskHi: the cut
// condition then depends on a window of maskHi+1 = 61 bytes, not on the few
// bytes that feed the low bits. maskHi leaves room for the mask to be
// shifted left by up to 3 bits (see scan).
const (
	maskLo = 16
	maskHi = 60
)

// Cutter finds FastCDC chunk boundaries for one set of Params. It holds the
// gear table and masks, computed once by NewCutter. A Cutter is immutable and
// safe for concurrent use.
type Cutter struct {
	// gear[k] is the gear table shifted left by k bits, for the unrolled
	// loop in scan.
	gear          [4][256]uint64
	maskS, maskL  uint64 // masks below and above the normal size
	min, avg, max int
	params        Params
}

// NewCutter validates p and precomputes its gear table and masks.
func NewCutter(p Params) (*Cutter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	c := &Cutter{
		min:    p.Min,
		avg:    p.Avg,
		max:    p.Max,
		params: p,
	}
	b := p.avgBits()
	c.maskS = spreadMask(b + p.Normalization)
	c.maskL = spreadMask(b - p.Normalization)
	// splitmix64 (Steele, Lea, Flood 2014) turns any seed, including 0,
	// into 256 well-mixed 64-bit values.
	s := p.Seed
	for i := range c.gear[0] {
		s += 0x9e3779b97f4a7c15
		z := s
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		for k := range c.gear {
			c.gear[k][i] = z << k
		}
	}
	return c, nil
}

// spreadMask returns a mask with n one-bits spread evenly over bit positions
// maskLo..maskHi, the top one at maskHi. A cut point is a position where the
// gear hash ANDed with the mask is zero, which on random data happens with
// probability 2^-n.
func spreadMask(n int) uint64 {
	const span = maskHi - maskLo
	if n < 1 || n > span+1 {
		panic(fmt.Sprintf("cdc: mask with %d bits", n)) // Validate rules this out
	}
	if n == 1 {
		return 1 << maskHi
	}
	var m uint64
	for j := range n {
		m |= 1 << (maskHi - j*span/(n-1))
	}
	return m
}

// Cut returns the length of the first chunk of data.
//
// If len(data) <= Min it returns len(data). Otherwise it returns the first
// FastCDC cut point after Min bytes, at most Max. If data holds fewer than
// Max bytes and no cut point, Cut returns len(data): a caller streaming a file
// must treat that as a chunk only at end of input, and otherwise call Cut
// again once it has more data (or at least Max bytes). Cut never looks past
// data[:Max], so the result for a prefix of at least Max bytes is final.
func (c *Cutter) Cut(data []byte) int {
	n := len(data)
	if n <= c.min {
		return n
	}
	if n > c.max {
		n = c.max
	}
	normal := c.avg
	if normal > n {
		normal = n
	}
	// The hash starts from zero at Min (cut-point skipping): bytes before
	// Min neither cost time nor influence the boundary.
	i, fp := c.scan(data[c.min:normal], 0, c.maskS)
	if i >= 0 {
		return c.min + i + 1
	}
	i, _ = c.scan(data[normal:n], fp, c.maskL)
	if i >= 0 {
		return normal + i + 1
	}
	return n
}

// scan feeds s into the gear hash fp, fp = fp<<1 + gear[b] for each byte b,
// and returns the index of the first byte after which fp&mask == 0, or -1,
// with the updated fp.
//
// It rolls four bytes per iteration, generalizing the "rolling two bytes"
// of the FastCDC 2020 paper: with t = fp<<4, the hash after the k-th byte
// (k = 1..4) shifted left by 4-k is t plus a sum of pre-shifted table values
// that does not depend on fp, and it is tested against mask<<(4-k), which
// loses no bit because mask's top bit is maskHi <= 60. The loop-carried
// dependency is then one shift and one add per four bytes; everything else
// can run in parallel.
func (c *Cutter) scan(s []byte, fp, mask uint64) (int, uint64) {
	g0, g1, g2, g3 := &c.gear[0], &c.gear[1], &c.gear[2], &c.gear[3]
	m1, m2, m3 := mask<<1, mask<<2, mask<<3
	i := 0
	for ; i <= len(s)-4; i += 4 {
		t := fp << 4
		a := g3[s[i]]
		if (t+a)&m3 == 0 {
			return i, 0
		}
		a += g2[s[i+1]]
		if (t+a)&m2 == 0 {
			return i + 1, 0
		}
		a += g1[s[i+2]]
		if (t+a)&m1 == 0 {
			return i + 2, 0
		}
		fp = t + (a + g0[s[i+3]])
		if fp&mask == 0 {
			return i + 3, fp
		}
	}
	for j, b := range s[i:] {
		fp = fp<<1 + g0[b]
		if fp&mask == 0 {
			return i + j, fp
		}
	}
	return -1, fp
}
