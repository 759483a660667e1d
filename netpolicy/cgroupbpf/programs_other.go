//go:build !linux

package cgroupbpf

import (
	"fmt"
	"net/netip"
	"time"
)

// Programs are the loaded egress programs and their maps. Only Linux has
// them: elsewhere Load returns ErrNotSupported.
type Programs struct{}

// EventReader reads the programs' decisions (Linux only).
type EventReader struct{}

var errOS = fmt.Errorf("%w: cgroup BPF programs need Linux", ErrNotSupported)

// Load returns an error wrapping ErrNotSupported: not Linux.
func Load(cfg Config) (*Programs, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, errOS
}

func (p *Programs) Attach(cgroupPath string) error { return errOS }
func (p *Programs) Pin(dir string) error           { return errOS }
func (p *Programs) Close() error                   { return nil }
func (p *Programs) Allow(rules ...Rule) error      { return errOS }
func (p *Programs) AllowAddr(addr netip.Addr, ports []PortRange, protos Proto, ttl time.Duration) error {
	return errOS
}
func (p *Programs) PruneAddrs() error                    { return errOS }
func (p *Programs) Destinations() ([]Destination, error) { return nil, errOS }
func (p *Programs) Stats() (Stats, error)                { return Stats{}, errOS }
func (p *Programs) Events() (*EventReader, error)        { return nil, errOS }

func (er *EventReader) Read() (Event, error)  { return Event{}, errOS }
func (er *EventReader) SetDeadline(time.Time) {}
func (er *EventReader) Close() error          { return nil }

// MountBPFFS returns an error wrapping ErrNotSupported: not Linux.
func MountBPFFS(dir string) error { return errOS }

// RemovePinned returns an error wrapping ErrNotSupported: not Linux.
func RemovePinned(dir string) error { return errOS }
