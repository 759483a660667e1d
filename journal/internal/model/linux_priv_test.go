//go:build linux

package model

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/journal"

	"github.com/cairnfs/cairn/internal/testenv"
)

// TestLinuxPrivileges runs directed scenarios for the setuid/setgid rules
// that random sequences reach rarely (a caller outside the file's group,
// setgid without group-execute), comparing the model with a tmpfs after
// every step like TestLinux.
func TestLinuxPrivileges(t *testing.T) {
	testenv.NeedRoot(t, "mounts a tmpfs and runs operations as other users", false)
	old := unix.Umask(0)
	t.Cleanup(func() { unix.Umask(old) })

	type step struct {
		c    journal.Caller
		desc string
		m    func(d *differ) error
		k    func(d *differ) error
	}
	ino := func(d *differ, rel string) journal.Ino {
		for i, l := range d.m.locs() {
			if l.path == rel {
				return i
			}
		}
		t.Fatalf("no %s in the model", rel)
		return 0
	}
	create := func(name string, mode uint32) step {
		return step{journal.Root, "create " + name,
			func(d *differ) error {
				_, err := d.m.Create(t.Context(), journal.Root, journal.RootIno, name, mode)
				return err
			},
			func(d *differ) error {
				fd, err := unix.Open(d.abs("./"+name), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, mode)
				if err == nil {
					unix.Close(fd)
				}
				return err
			}}
	}
	mkdir := func(name string, mode uint32) step {
		return step{journal.Root, "mkdir " + name,
			func(d *differ) error {
				_, err := d.m.Mkdir(t.Context(), journal.Root, journal.RootIno, name, mode)
				return err
			},
			func(d *differ) error { return unix.Mkdir(d.abs("./"+name), mode) }}
	}
	chown := func(c journal.Caller, name string, uid, gid int) step {
		return step{c, "chown " + name,
			func(d *differ) error {
				in := journal.SetAttrIn{UID: uint32(uid), GID: uint32(gid)}
				if uid >= 0 {
					in.Valid |= journal.SetUID
				}
				if gid >= 0 {
					in.Valid |= journal.SetGID
				}
				_, err := d.m.SetAttr(t.Context(), c, ino(d, "./"+name), in)
				return err
			},
			func(d *differ) error { return unix.Lchown(d.abs("./"+name), uid, gid) }}
	}
	chmod := func(c journal.Caller, name string, mode uint32) step {
		return step{c, "chmod " + name,
			func(d *differ) error {
				_, err := d.m.SetAttr(t.Context(), c, ino(d, "./"+name), journal.SetAttrIn{Valid: journal.SetMode, Mode: mode})
				return err
			},
			func(d *differ) error { return unix.Chmod(d.abs("./"+name), mode) }}
	}
	// withFD runs a data operation on an O_WRONLY descriptor.
	withFD := func(d *differ, name string, fn func(fd int) error) error {
		fd, err := unix.Open(d.abs("./"+name), unix.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return fn(fd)
	}
	write := func(c journal.Caller, name string) step {
		return step{c, "write " + name,
			func(d *differ) error {
				_, err := d.m.Write(t.Context(), c, ino(d, "./"+name), []byte("x"), 0)
				return err
			},
			func(d *differ) error {
				return withFD(d, name, func(fd int) error { _, err := unix.Pwrite(fd, []byte("x"), 0); return err })
			}}
	}
	truncate := func(c journal.Caller, name string) step {
		return step{c, "truncate " + name,
			func(d *differ) error {
				_, err := d.m.SetAttr(t.Context(), c, ino(d, "./"+name), journal.SetAttrIn{Valid: journal.SetSize, Size: 3})
				return err
			},
			func(d *differ) error { return withFD(d, name, func(fd int) error { return unix.Ftruncate(fd, 3) }) }}
	}
	fallocate := func(c journal.Caller, name string, mode journal.FallocMode) step {
		return step{c, "fallocate " + name,
			func(d *differ) error { return d.m.Fallocate(t.Context(), c, ino(d, "./"+name), mode, 0, 10) },
			func(d *differ) error {
				return withFD(d, name, func(fd int) error { return unix.Fallocate(fd, uint32(mode), 0, 10) })
			}}
	}
	copyInto := func(c journal.Caller, from, to string) step {
		return step{c, "copy_file_range into " + to,
			func(d *differ) error {
				_, err := d.m.CopyFileRange(t.Context(), c, ino(d, "./"+from), 0, ino(d, "./"+to), 0, 1)
				return err
			},
			func(d *differ) error {
				in, err := unix.Open(d.abs("./"+from), unix.O_RDONLY, 0)
				if err != nil {
					return err
				}
				defer unix.Close(in)
				return withFD(d, to, func(fd int) error { _, err := unix.CopyFileRange(in, nil, fd, nil, 1, 0); return err })
			}}
	}

	for _, sc := range []struct {
		name  string
		steps []step
	}{
		{"WriteOutsideGroupClearsSetgid", []step{create("f", 0o2746), write(user1, "f")}},
		{"WriteInGroupKeepsSetgid", []step{create("f", 0o2766), chown(journal.Root, "f", 0, 1000), write(user1, "f")}},
		{"WriteWithGroupExecClearsSetgid", []step{create("f", 0o6777), chown(journal.Root, "f", 0, 1000), write(user1, "f")}},
		{"RootWriteKeepsBits", []step{create("f", 0o6777), write(journal.Root, "f")}},
		{"TruncateOutsideGroup", []step{create("f", 0o6746), chown(journal.Root, "f", 1000, 0), truncate(user1, "f")}},
		{"FallocateKeepSizeClearsSetuid", []step{create("f", 0o4766), create("g", 0o4766), write(journal.Root, "g"),
			fallocate(user1, "f", journal.FallocKeepSize), fallocate(user1, "g", journal.FallocPunchHole|journal.FallocKeepSize)}},
		{"CopyFileRangeClearsSetuid", []step{create("src", 0o644), write(journal.Root, "src"), create("f", 0o4766),
			copyInto(user1, "src", "f")}},
		{"ChgrpFromForeignGroup", []step{create("f", 0o2745), chown(journal.Root, "f", 1000, 0), chown(user1, "f", -1, 2000)}},
		{"ChgrpFromOwnGroup", []step{create("f", 0o2745), chown(journal.Root, "f", 1000, 1000), chown(user1, "f", -1, 2000)}},
		{"RootChown", []step{create("f", 0o6755), create("g", 0o6745), chown(journal.Root, "f", 1000, -1),
			chown(journal.Root, "g", 1000, -1)}},
		{"RootChownDirKeepsBits", []step{mkdir("d", 0o1777), chmod(journal.Root, "d", 0o7777), chown(journal.Root, "d", 1000, 1000)}},
		{"ChmodDirOutsideGroup", []step{mkdir("d", 0o777), chown(journal.Root, "d", 1001, 1000), chmod(user2, "d", 0o2775)}},
		{"ChmodFileOutsideGroup", []step{create("f", 0o644), chown(journal.Root, "f", 1001, 1000), chmod(user2, "f", 0o2755)}},
		{"SetgidDirInheritance", []step{mkdir("d", 0o2777), chown(journal.Root, "d", 0, 1000), {user2, "create in d",
			func(d *differ) error {
				_, err := d.m.Create(t.Context(), user2, ino(d, "./d"), "f", 0o2775)
				return err
			},
			func(d *differ) error {
				fd, err := unix.Open(d.abs("./d/f"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o2775)
				if err == nil {
					unix.Close(fd)
				}
				return err
			}}, {user2, "mkdir in d",
			func(d *differ) error { _, err := d.m.Mkdir(t.Context(), user2, ino(d, "./d"), "e", 0o755); return err },
			func(d *differ) error { return unix.Mkdir(d.abs("./d/e"), 0o755) }}}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			d := newDiffer(t, 0)
			for _, s := range sc.steps {
				d.now += 1000
				d.waitTick()
				op := d.record(s.c, "%s", s.desc)
				merr := s.m(d)
				kerr := asCaller(s.c, func() error { return s.k(d) })
				d.timed = true
				d.compareErr(op, merr, kerr)
				d.ran++
				d.compare()
			}
		})
	}
}
