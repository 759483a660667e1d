//go:build !linux

package fuseuring

import "github.com/hanwen/go-fuse/v2/fuse"

// Handler serves one FUSE request (see the Linux version).
type Handler interface {
	HandleRequest(in, out [][]byte) (int, fuse.Status)
}

// Config says how large the ring is (see the Linux version).
type Config struct {
	Queues, Entries, MaxPayload int
	Logf                        func(format string, args ...any)
}

// Ring is not available outside Linux.
type Ring struct{}

// PayloadSize is the payload buffer size for a connection.
func PayloadSize(maxWrite, maxPages int) int { return max(8192, maxWrite, maxPages*4096) }

// Start returns ErrNotSupported outside Linux.
func Start(devFd int, h Handler, cfg Config) (*Ring, error) { return nil, ErrNotSupported }

// BuffersMapped is 0.
func BuffersMapped() int { return 0 }

// Wait returns at once.
func (r *Ring) Wait() {}

// Queues is 0.
func (r *Ring) Queues() int { return 0 }

// Requests is 0.
func (r *Ring) Requests() uint64 { return 0 }
