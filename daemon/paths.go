package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Paths are where a workspace's local state lives in the state directory
// (HOME):
//
//	HOME/workspaces/WS/journal     the journal (Badger + staging files)
//	HOME/workspaces/WS/mount.json  the mount record, while a daemon serves it
//	HOME/workspaces/WS/lock        locked (flock) by the daemon that has the workspace
//	HOME/workspaces/WS/daemon.log  a detached daemon's log
//	HOME/workspaces/WS/outbox      uploads to a remote store not done yet (package outbox)
//	HOME/run/WS.sock               the daemon's control socket
//	HOME/cache                     the store's local index cache
type Paths struct {
	Home, Dir, Journal, Record, Lock, Log, Socket, Cache, Outbox string
}

// PathsOf returns the paths of workspace ws under home.
func PathsOf(home, ws string) Paths {
	dir := filepath.Join(home, "workspaces", ws)
	return Paths{
		Home:    home,
		Dir:     dir,
		Journal: filepath.Join(dir, "journal"),
		Record:  filepath.Join(dir, "mount.json"),
		Lock:    filepath.Join(dir, "lock"),
		Log:     filepath.Join(dir, "daemon.log"),
		Socket:  filepath.Join(home, "run", ws+".sock"),
		Cache:   filepath.Join(home, "cache"),
		Outbox:  filepath.Join(dir, "outbox"),
	}
}

// socketPathMax is the longest unix socket path Linux takes (sun_path).
const socketPathMax = 107

// Record is what a running daemon writes about itself, so that the CLI can
// find it by workspace or by mount point.
type Record struct {
	Workspace string    `json:"workspace"`
	Dir       string    `json:"dir"` // the mount point
	PID       int       `json:"pid"`
	Socket    string    `json:"socket"`
	Store     string    `json:"store"`
	Started   time.Time `json:"started"`
}

// Alive reports whether the record's daemon process still runs (a zombie
// does not: a killed daemon whose parent never reaps it stays one).
func (r *Record) Alive() bool {
	if r.PID <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.PID))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func writeRecord(path string, r *Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadRecord reads a workspace's mount record; ErrNotMounted if there is
// none.
func ReadRecord(home, ws string) (*Record, error) {
	b, err := os.ReadFile(PathsOf(home, ws).Record)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("workspace %q: %w", ws, ErrNotMounted)
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("mount record of %q is unreadable (%v); `cairn unmount %s` cleans it up", ws, err, ws)
	}
	return &r, nil
}

// Records returns the mount records in home, by workspace name.
func Records(home string) ([]*Record, error) {
	ents, err := os.ReadDir(filepath.Join(home, "workspaces"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, e := range ents {
		r, err := ReadRecord(home, e.Name())
		if errors.Is(err, ErrNotMounted) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// FindRecord finds the record of a workspace name or a mount point.
func FindRecord(home, what string) (*Record, error) {
	if r, err := ReadRecord(home, what); err == nil || !errors.Is(err, ErrNotMounted) {
		return r, err
	}
	abs, err := filepath.Abs(what)
	if err != nil {
		return nil, err
	}
	recs, err := Records(home)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.Dir == abs {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%q is neither a mounted workspace nor a cairn mount point: %w", what, ErrNotMounted)
}
