//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

var probeSeq int

// probeName is a fresh name for a file the probe makes and removes.
func probeName() string {
	probeSeq++
	return ".escapeprobe-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(probeSeq)
}

// made classifies a deny-write attempt that creates something: when it
// worked, undo removes it again (noted if that fails).
func made(name string, err error, undo func() error) attempt {
	a := denied(name, err)
	if err == nil {
		if uerr := undo(); uerr != nil {
			a.Detail = "ok(CLEANUP-FAILED:" + errText(uerr) + ")"
		}
	}
	return a
}

// checkWriteDeny tries to modify each -deny-write path: every attempt must
// fail. For a directory: create+write a file, mkdir, symlink, mkfifo, hard
// link of a file in it, rename a file from the scratch directory into it,
// rename a regular file in it (and back), chmod it to its own mode. For a file:
// open for writing (no truncation, nothing written), truncate to its own
// size, chmod to its own mode, rename it (and back). Whatever an attempt
// makes is removed, and what it renames is renamed back.
func checkWriteDeny(o *options) []attempt {
	var atts []attempt
	for _, p := range o.denyWrite {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			atts = append(atts, attempt{p, Errored, "missing:" + errText(err)})
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			atts = append(atts, denyDir(o, p, st)...)
		} else {
			atts = append(atts, denyFile(p, st)...)
		}
	}
	return atts
}

func denyDir(o *options, dir string, st unix.Stat_t) []attempt {
	var atts []attempt
	tag := func(op string) string { return op + ":" + dir }

	p := filepath.Join(dir, probeName())
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		f.Write([]byte("escapeprobe\n"))
		f.Close()
	}
	atts = append(atts, made(tag("create"), err, func() error { return os.Remove(p) }))

	p = filepath.Join(dir, probeName())
	atts = append(atts, made(tag("mkdir"), unix.Mkdir(p, 0o700), func() error { return unix.Rmdir(p) }))

	p = filepath.Join(dir, probeName())
	atts = append(atts, made(tag("symlink"), unix.Symlink("escapeprobe", p), func() error { return unix.Unlink(p) }))

	p = filepath.Join(dir, probeName())
	atts = append(atts, made(tag("mkfifo"), unix.Mkfifo(p, 0o600), func() error { return unix.Unlink(p) }))

	file := existingFile(dir)
	if file != "" {
		p = filepath.Join(dir, probeName())
		atts = append(atts, made(tag("link"), unix.Link(filepath.Join(dir, file), p), func() error { return unix.Unlink(p) }))
	}

	if work, err := o.workDir(); err != nil {
		atts = append(atts, errorAttempt(tag("rename-in"), err))
	} else {
		src := filepath.Join(work, probeName())
		if err := os.WriteFile(src, []byte("escapeprobe\n"), 0o600); err != nil {
			atts = append(atts, errorAttempt(tag("rename-in"), err))
		} else {
			dst := filepath.Join(dir, probeName())
			atts = append(atts, made(tag("rename-in"), unix.Rename(src, dst), func() error { return unix.Unlink(dst) }))
			os.Remove(src)
		}
	}

	if file != "" {
		from := filepath.Join(dir, file)
		to := filepath.Join(dir, probeName())
		atts = append(atts, made(tag("rename"), unix.Rename(from, to), func() error { return unix.Rename(to, from) }))
	}

	atts = append(atts, denied(tag("chmod"), unix.Chmod(dir, st.Mode&0o7777)))
	return atts
}

// existingFile returns a regular file of dir (not the probe's own) for the
// link and rename attempts, or "" when there is none. Only a regular file
// is ever renamed (and back): never a directory such as /bin.
func existingFile(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".escapeprobe-") {
			return e.Name()
		}
	}
	return ""
}

func denyFile(path string, st unix.Stat_t) []attempt {
	tag := func(op string) string { return op + ":" + path }
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err == nil {
		unix.Close(fd)
	}
	atts := []attempt{denied(tag("open-write"), err)}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		atts = append(atts, denied(tag("truncate"), unix.Truncate(path, st.Size)))
	}
	atts = append(atts, denied(tag("chmod"), unix.Chmod(path, st.Mode&0o7777)))
	to := path + probeName()
	atts = append(atts, made(tag("rename"), unix.Rename(path, to), func() error { return unix.Rename(to, path) }))
	return atts
}

// checkWriteAllowed: in each -allow-write directory, create, write and read
// back a file, mkdir, symlink, mkfifo and rename must work (OK), each
// undone; a refusal is DENIED.
func checkWriteAllowed(o *options) []attempt {
	var atts []attempt
	for _, dir := range o.allowWrite {
		tag := func(op string) string { return op + ":" + dir }
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			atts = append(atts, attempt{dir, Errored, "not-a-directory:" + errText(err)})
			continue
		}
		p := filepath.Join(dir, probeName())
		atts = append(atts, allowed(tag("create"), writeReadBack(p)))
		os.Remove(p)

		p = filepath.Join(dir, probeName())
		err := unix.Mkdir(p, 0o700)
		atts = append(atts, allowed(tag("mkdir"), err))
		unix.Rmdir(p)

		p = filepath.Join(dir, probeName())
		atts = append(atts, allowed(tag("symlink"), unix.Symlink("escapeprobe", p)))
		unix.Unlink(p)

		p = filepath.Join(dir, probeName())
		atts = append(atts, allowed(tag("mkfifo"), unix.Mkfifo(p, 0o600)))
		unix.Unlink(p)

		p = filepath.Join(dir, probeName())
		q := filepath.Join(dir, probeName())
		err = os.WriteFile(p, nil, 0o600)
		if err == nil {
			err = unix.Rename(p, q)
		}
		atts = append(atts, allowed(tag("rename"), err))
		os.Remove(p)
		os.Remove(q)
	}
	return atts
}

func writeReadBack(p string) error {
	want := []byte("escapeprobe write-allowed\n")
	if err := os.WriteFile(p, want, 0o600); err != nil {
		return err
	}
	got, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("read back %q", got)
	}
	return nil
}
