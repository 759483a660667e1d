package fs

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/journal"
)

// invalidID is FUSE_INVALID_UIDGID: the uid and gid of a request's header
// when the kernel does not send them. A server that declares
// FUSE_ALLOW_IDMAP gets the caller's ids only in requests that create an
// inode (MKNOD, MKDIR, SYMLINK, CREATE, TMPFILE, RENAME2 with WHITEOUT),
// mapped through the id mapping of the mount the request came through;
// every other request, on every mount of the server, carries this.
const invalidID = ^uint32(0)

// nobody is the caller of a request whose process cannot be found: no
// privilege, no group. Its ids are the overflow ids (65534) the kernel
// shows for an id a namespace cannot name.
var nobody = journal.Caller{UID: overflowID, GID: overflowID}

const overflowID = 65534

// credsTTL is how long a process's credentials are cached: short, because
// a process may change its credentials (setuid, setgroups) and a pid may
// be reused once its process is gone.
const credsTTL = time.Second

// creds are a thread's filesystem credentials as /proc shows them to the
// daemon: ids of the daemon's user namespace (the host's).
type creds struct {
	uid, gid uint32 // fsuid, fsgid
	groups   []uint32
}

// caller is the journal's view of the process making a request.
//
// A request with ids in its header (every request without idmap, and the
// creating ones with it) is taken at its word; the supplementary groups,
// which FUSE never sends, are read from /proc only when asked for (groups)
// and the caller is not root. A request without ids (FUSE_INVALID_UIDGID)
// gets its caller's credentials from /proc/<pid>/status, translated into
// the workspace's ids (workspaceCaller); if that process cannot be found
// (gone, or in a pid namespace the daemon does not see, where the kernel
// sends pid 0) the caller is nobody.
func (f *FS) caller(h *fuse.InHeader, groups bool) journal.Caller {
	if h.Uid != invalidID && h.Gid != invalidID {
		c := journal.Caller{UID: h.Uid, GID: h.Gid}
		if groups && c.UID != 0 {
			if p, ok := f.creds.get(h.Pid); ok {
				c.Groups = f.workspaceCaller(p).Groups
			}
		}
		return c
	}
	p, ok := f.creds.get(h.Pid)
	if !ok {
		return nobody
	}
	return f.workspaceCaller(p)
}

// workspaceCaller translates a process's host credentials into the ids
// the workspace stores. Without Options.IDMap they are the same. With it,
// a host id in [IDMapBase, IDMapBase+IDMapSize) belongs to a sandbox's
// user namespace, whose processes reach the workspace only through an
// id-mapped bind of the mount: it stands for id-IDMapBase, as the kernel
// maps it on that bind. Other ids are the host's own and stay as they are.
// A process whose uid is a sandbox's cannot name an id outside the range
// (the kernel maps none of them on its bind): such a gid becomes nobody's
// and such supplementary groups are left out.
func (f *FS) workspaceCaller(p creds) journal.Caller {
	if !f.opts.IDMap {
		return journal.Caller{UID: p.uid, GID: p.gid, Groups: p.groups}
	}
	base, size := f.opts.IDMapBase, f.opts.IDMapSize
	mapped := func(id uint32) bool { return id >= base && id-base < size }
	sandboxed := mapped(p.uid)
	c := journal.Caller{UID: p.uid, GID: p.gid}
	switch {
	case sandboxed:
		c.UID -= base
		if mapped(c.GID) {
			c.GID -= base
		} else {
			c.GID = overflowID
		}
	case mapped(c.GID):
		c.GID -= base
	}
	for _, g := range p.groups {
		switch {
		case mapped(g):
			c.Groups = append(c.Groups, g-base)
		case !sandboxed:
			c.Groups = append(c.Groups, g)
		}
	}
	return c
}

// credsCache caches the credentials of the threads making requests, for
// credsTTL: one read of /proc per thread and second at most.
type credsCache struct {
	mu  sync.Mutex
	at  time.Time
	gen uint64 // bumped at each reset, so a read of an older one is not stored
	m   map[uint32]creds
}

// get returns the credentials of thread pid (a pid of the daemon's pid
// namespace), false if it is 0 or gone.
func (c *credsCache) get(pid uint32) (creds, bool) {
	if pid == 0 {
		return creds{}, false
	}
	c.mu.Lock()
	if c.m == nil || time.Since(c.at) > credsTTL {
		c.m, c.at = make(map[uint32]creds), time.Now()
		c.gen++
	}
	if p, ok := c.m[pid]; ok {
		c.mu.Unlock()
		return p, true
	}
	gen := c.gen
	c.mu.Unlock()
	p, err := readCreds(pid)
	if err != nil {
		return creds{}, false
	}
	c.mu.Lock()
	if c.gen == gen {
		c.m[pid] = p
	}
	c.mu.Unlock()
	return p, true
}

// readCreds reads the credentials of thread pid from /proc. A thread id
// names its thread's own /proc/<tid> directory (not listed, but there):
// credentials, setfsuid's included, are per thread.
func readCreds(pid uint32) (creds, error) {
	fd, err := unix.Open("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return creds{}, err
	}
	defer unix.Close(fd)
	// One read holds it all but for thousands of groups (os.ReadFile
	// would take twice as long: a stat and reads until EOF).
	b := make([]byte, 4096)
	n := 0
	for {
		if n == len(b) {
			b = append(b, make([]byte, len(b))...)
		}
		m, err := unix.Read(fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return creds{}, err
		}
		n += m
		if m == 0 || n < len(b) {
			// seq_file hands over the whole text in the first read
			// that has room for it.
			break
		}
	}
	return parseStatus(b[:n])
}

// errStatus: a /proc/<pid>/status without the lines its credentials are
// read from.
var errStatus = errors.New("no credentials in /proc status")

// parseStatus reads the filesystem uid and gid (the fourth field of the
// Uid: and Gid: lines: real, effective, saved, filesystem) and the
// supplementary groups (Groups:) from the text of /proc/<pid>/status. Only
// whole lines count: a text cut in the middle of one lacks it.
func parseStatus(b []byte) (creds, error) {
	var p creds
	var have int
	for len(b) > 0 && have != 7 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // a line cut short: not trusted
		}
		line := b[:i]
		b = b[i+1:]
		key, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		switch string(key) {
		case "Uid", "Gid":
			f := bytes.Fields(rest)
			if len(f) != 4 {
				return creds{}, fmt.Errorf("%w: %q", errStatus, line)
			}
			id, err := strconv.ParseUint(string(f[3]), 10, 32)
			if err != nil {
				return creds{}, fmt.Errorf("%w: %q", errStatus, line)
			}
			if key[0] == 'U' {
				p.uid, have = uint32(id), have|1
			} else {
				p.gid, have = uint32(id), have|2
			}
		case "Groups":
			for _, f := range bytes.Fields(rest) {
				g, err := strconv.ParseUint(string(f), 10, 32)
				if err != nil {
					return creds{}, fmt.Errorf("%w: %q", errStatus, line)
				}
				p.groups = append(p.groups, uint32(g))
			}
			have |= 4
		}
	}
	if have != 7 {
		return creds{}, errStatus
	}
	return p, nil
}
