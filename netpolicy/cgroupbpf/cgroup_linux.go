package cgroupbpf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupByID returns the path of the cgroup2 directory whose ID (its inode
// number, which BPF link info reports) is id: open_by_handle_at on the
// cgroup2 mount root with a kernfs file handle, as systemd does.
func cgroupByID(root string, id uint64) (string, error) {
	mfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(mfd)
	const fileIDKernfs = 0xfe // FILEID_KERNFS: the handle is the 8-byte kernfs node ID
	var h [8]byte
	binary.NativeEndian.PutUint64(h[:], id)
	fd, err := unix.OpenByHandleAt(mfd, unix.NewFileHandle(fileIDKernfs, h[:]), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("open cgroup %d: %w", id, err)
	}
	defer unix.Close(fd)
	dir, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(dir, "/") {
		return "", fmt.Errorf("cgroup %d is outside this mount namespace (%s)", id, dir)
	}
	return dir, nil
}

// cgroup2Root is the mount point of the whole cgroup2 hierarchy.
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		// 36 35 0:30 / /sys/fs/cgroup rw,... - cgroup2 cgroup2 rw
		if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
			return unescapeMountPath(f[4]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%w: no cgroup2 hierarchy is mounted", ErrNotSupported)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupPopulated reports whether the cgroup2 directory dir or one below it
// has a process.
func cgroupPopulated(dir string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v != "0", nil
		}
	}
	return false, fmt.Errorf("%s/cgroup.events has no populated line", dir)
}
