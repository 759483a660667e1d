package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/journal"
)

// TypeName is the mount's type as /proc/mounts shows it: "fuse.cairn".
const TypeName = "cairn"

// Mount mounts f at dir and serves it until the mount goes away (Unmount,
// or `umount`). It returns once the kernel has the mount.
//
// The options, each for speed or for sandboxes:
//   - direct mount(2) as root (no fusermount), type fuse.cairn;
//   - default_permissions: the kernel checks permissions against the
//     attributes, as on any local filesystem; allow_other: sandboxed
//     processes run as other uids;
//   - MaxWrite 1 MiB (fewer, larger requests when passthrough is off);
//   - passthrough (go-fuse negotiates it; Open hands over backing files);
//   - HANDLE_KILLPRIV_V2: the journal clears setuid/setgid on write,
//     truncate and chown itself, so the kernel sends no GETXATTR of
//     security.capability before every write;
//   - READDIRPLUS, symlink caching, and (in the replies) long entry,
//     negative-entry and attribute timeouts;
//   - with Options.IDMap, FUSE_ALLOW_IDMAP (go-fuse negotiates it: a
//     kernel without it mounts as usual, and IDMapped reports false);
//   - with Options.Transport auto or uring, FUSE_OVER_IO_URING: requests
//     are then served through io_uring (package fuseuring) where the
//     kernel offers it (Server.Transport says which).
func Mount(dir string, f *FS, fsName string) (*Server, error) {
	return mount(dir, f, f.opts, fsName)
}

// mount mounts raw (f, or in tests f wrapped) with the options of opts.
//
// The mount is made here, on a /dev/fuse descriptor of cairn's own, and
// go-fuse serves that descriptor (its "/dev/fd/N" mount point): INIT,
// then every request over /dev/fuse, notifications and backing files.
// With io_uring, the ring takes the requests from then on; go-fuse still
// serves what the kernel sends over /dev/fuse (FORGET, INTERRUPT).
func mount(dir string, raw fuse.RawFileSystem, o Options, fsName string) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	o.setDefaults()
	transport, err := ParseTransport(string(o.Transport))
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	opts := &fuse.MountOptions{
		AllowOther:           true,
		Options:              []string{"default_permissions"},
		MaxWrite:             1 << 20,
		MaxBackground:        64,
		FsName:               fsName,
		Name:                 TypeName,
		EnableSymlinkCaching: true,
		ExtraCapabilities:    fuse.CAP_HANDLE_KILLPRIV_V2,
		IDMappedMount:        o.IDMap,
		Logger:               nil,
	}
	if transport != TransportDev {
		opts.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	}
	fd, err := mountDev(dir, opts)
	if err != nil {
		if errno, ok := err.(syscall.Errno); ok && errno == syscall.EPERM {
			return nil, fmt.Errorf("mount %s: %w (cairn mounts with mount(2) and needs root or CAP_SYS_ADMIN)", dir, err)
		}
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	srv, err := fuse.NewServer(raw, "/dev/fd/"+strconv.Itoa(fd), opts)
	if err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		unix.Close(fd)
		return nil, fmt.Errorf("mount %s: the kernel did not answer: %w", dir, err)
	}
	s := &Server{srv: srv, dir: dir, done: make(chan struct{})}
	served := make(chan struct{})
	var ps *fuse.ProtocolServer
	if transport != TransportDev {
		// The ring starts before anything reads /dev/fuse: what the
		// kernel sends there meanwhile waits for the reader below.
		ps, s.ring, err = startRing(fd, raw, opts, srv.KernelSettings(), o.Logf)
		if err != nil && transport == TransportURing {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
			go func() {
				srv.Serve()
				close(served)
			}()
			<-served
			return nil, fmt.Errorf("mount %s: %w", dir, err)
		}
		if err != nil {
			s.why = err.Error()
			o.Logf("cairn: serving %s through /dev/fuse: %v", dir, err)
		}
	}
	go func() {
		if s.ring != nil {
			// What still comes over /dev/fuse (FORGET, INTERRUPT) is
			// served by the ring's request parser, which knows the
			// requests in flight on the ring: an INTERRUPT finds them.
			serveDev(fd, ps, opts.MaxWrite, o.Logf)
		}
		// go-fuse's loop; with the ring, it finds the connection gone
		// and only closes the descriptor and tells the filesystem.
		srv.Serve()
		close(served)
	}()
	go func() {
		<-served
		if s.ring != nil {
			s.ring.Wait()
		}
		close(s.done)
	}()
	pollHack(dir)
	return s, nil
}

// pollHack makes the kernel ask for POLL once, which go-fuse answers
// ENOSYS for good (go-fuse's WaitMount does this, but not for a mount
// made on a descriptor of one's own): a later POLL could wait for a server
// thread Go's netpoller holds.
func pollHack(dir string) {
	fd, err := unix.Open(filepath.Join(dir, ".go-fuse-epoll-hack"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
}

// IDMapped reports whether the mount may be bound id-mapped: Options.IDMap
// was set and the kernel offered FUSE_ALLOW_IDMAP (Linux 6.12 and later).
// False before the mount serves.
func (f *FS) IDMapped() bool {
	s := f.server
	return f.opts.IDMap && s != nil && s.KernelSettings().Flags64()&fuse.CAP_ALLOW_IDMAP != 0
}

// Invalidator returns the journal.Invalidator of f: it drops what the
// kernel cached of what the journal changed by itself.
func (f *FS) Invalidator() journal.Invalidator { return invalidator{f} }

type invalidator struct{ f *FS }

// InvalidateEntry drops the kernel's lookup of name in parent, and makes
// parent's open handles read its entries again.
func (i invalidator) InvalidateEntry(parent journal.Ino, name string) {
	i.f.changed(parent)
	if s := i.f.server; s != nil {
		s.EntryNotify(uint64(parent), name)
	}
}

// InvalidateInode drops the kernel's attributes and pages of ino (of a
// directory: its cached listing), and makes the open handles of a
// directory read its entries again.
func (i invalidator) InvalidateInode(ino journal.Ino) {
	i.f.changed(ino)
	if s := i.f.server; s != nil {
		s.InodeNotify(uint64(ino), 0, -1) // offset 0, length <= 0: every page
	}
}

// InvalidateAll drops the attributes, pages and entries of every inode the
// kernel knows, and makes every open directory handle read its entries
// again. (Inodes the kernel keeps for files open across a rollback are
// replaced at their next lookup: see entry.)
func (i invalidator) InvalidateAll() {
	i.f.mu.Lock()
	i.f.allChanges++
	i.f.mu.Unlock()
	s := i.f.server
	if s == nil {
		return
	}
	i.f.mu.Lock()
	inos := slices.Collect(maps.Keys(i.f.lookups))
	i.f.mu.Unlock()
	for _, n := range inos { // outside the lock: a notification may wait for a request
		s.InodeNotify(uint64(n), 0, -1)
	}
	s.InodeNotify(uint64(journal.RootIno), 0, -1)
	// Names (positive and negative dentries) are cached per directory
	// entry, which the inode notifications above do not reach: bump the
	// connection's epoch, which makes the kernel look every name up again.
	if err := incEpoch(); err != nil {
		i.f.opts.Logf("cairn: the kernel's cached names could not be dropped (%v): names may resolve to the old state until remount", err)
	}
}

// notifyIncEpoch is FUSE_NOTIFY_INC_EPOCH (Linux 6.16), which go-fuse
// does not send.
const notifyIncEpoch = 8

// incEpoch sends FUSE_NOTIFY_INC_EPOCH on this process's /dev/fuse
// connection (the daemon serves one mount).
func incEpoch() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); target != "/dev/fuse" {
			continue
		}
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var msg [16]byte // fuse_out_header: len, error (the notify code), unique 0
		binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
		binary.LittleEndian.PutUint32(msg[4:], notifyIncEpoch)
		_, err = syscall.Write(fd, msg[:])
		return err
	}
	return errors.New("no /dev/fuse descriptor")
}
