// Package scratchfs makes a fresh, loop-mounted ext4 for benchmarks, so
// that their file creations do not depend on what ran before them on the
// machine's own filesystem (see Make).
package scratchfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Make makes a fresh ext4 of size bytes (mkfs.ext4's defaults, so
// with a journal, as on a typical host) and mounts it at base/fs. The
// machines here run on an ext4 without a journal, whose inode allocator
// skips inodes freed in the last ~30 s one by one (recently_deleted): after
// one target's files are deleted, the next target's creates slow down
// tenfold, so results would depend on the order of the targets.
func Make(base string, size int64) (func(), error) {
	img, mnt := filepath.Join(base, "fs.img"), filepath.Join(base, "fs")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(img, size); err != nil {
		return nil, err
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mkfs.ext4 (or run with -scratch 0): %v: %s", err, out)
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	// The loop device does direct I/O on its image: otherwise every page
	// is cached twice (the scratch file system's and the image file's) and
	// written back twice, which a real disk does not do, and heavy writes
	// then measure the host's page cache more than the code.
	dev, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", img).Output()
	if err != nil {
		return nil, fmt.Errorf("losetup the scratch ext4 (or run with -scratch 0): %w", err)
	}
	loop := strings.TrimSpace(string(dev))
	if out, err := exec.Command("mount", loop, mnt).CombinedOutput(); err != nil {
		exec.Command("losetup", "-d", loop).Run()
		return nil, fmt.Errorf("mount the scratch ext4 (or run with -scratch 0): %v: %s", err, out)
	}
	return func() {
		// The cairn daemon may still be exiting: retry, then detach.
		defer exec.Command("losetup", "-d", loop).Run() // after a lazy umount: detached once the file system is gone
		for range 50 {
			if exec.Command("umount", mnt).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "scratchfs: umount %s: %v: %s\n", mnt, err, out)
		}
	}, nil
}

// WorkDir makes a temporary directory under dir for a benchmark and, with
// size > 0, a fresh ext4 of size bytes inside it (see Make). It returns
// where to work and what removes it all.
func WorkDir(dir, prefix string, size int64) (string, func(), error) {
	base, err := os.MkdirTemp(dir, prefix)
	if err != nil {
		return "", nil, err
	}
	if size <= 0 {
		return base, func() { os.RemoveAll(base) }, nil
	}
	unmount, err := Make(base, size)
	if err != nil {
		os.RemoveAll(base)
		return "", nil, err
	}
	return filepath.Join(base, "fs"), func() { unmount(); os.RemoveAll(base) }, nil
}
