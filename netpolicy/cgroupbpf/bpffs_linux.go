package cgroupbpf

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// MountBPFFS makes dir a bpffs mount point for Pin: it creates dir (0700)
// if needed and mounts a bpffs there unless one already is. The caller
// unmounts it (unix.Unmount) when it no longer wants the pins it holds;
// unmounting does not remove them while the mount is shared with another
// mount point.
func MountBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cgroupbpf: bpffs directory: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("cgroupbpf: bpffs directory: %w", err)
	}
	if st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpf", dir, "bpf", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700"); err != nil {
		if err == unix.ENODEV {
			return fmt.Errorf("%w: mount bpffs on %s: %w", ErrNotSupported, dir, err)
		}
		return fmt.Errorf("cgroupbpf: mount bpffs on %s: %w", dir, err)
	}
	return nil
}

// checkBPFFS reports whether dir is on a bpffs.
func checkBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("cgroupbpf: %w", err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("cgroupbpf: %s is not on a bpffs: mount one first (MountBPFFS)", dir)
	}
	return nil
}
