package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// The parent's side of the mounts: host root resolves every host path and
// hands init detached mount trees (open_tree(OPEN_TREE_CLONE)), which init
// attaches in its own mount namespace with move_mount. Init itself never
// resolves a host path: as the sandbox's root it could not search
// directories that only host root may enter, and nothing the host names is
// then reachable from the sandbox by path.

// skippedBase are the entries of the base's root the sandbox does not take
// from the base: it makes its own.
var skippedBase = []string{"proc", "sys", "dev", "tmp", "run", "workspace"}

// devices are the device nodes bound from the host's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// treeSet collects the descriptors sent to init; index i of fds is what the
// config calls FD i.
type treeSet struct {
	fds []int
}

func (t *treeSet) add(fd int) int {
	t.fds = append(t.fds, fd)
	return len(t.fds) - 1
}

func (t *treeSet) close() {
	closeAll(t.fds)
	t.fds = nil
}

// cloneTree returns a detached copy of the mount tree at name, relative to
// dirfd (recursive: a mount with submounts can only be copied whole in a
// user namespace), made private so that nothing mounted on it propagates to
// the host's mounts it was copied from.
func cloneTree(dirfd int, name string, recursive bool) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_SYMLINK_NOFOLLOW)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	fd, err := unix.OpenTree(dirfd, name, flags)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", name, err)
	}
	attr := unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("make the copy of %s private: %w", name, err)
	}
	return fd, nil
}

// addBase adds the entries of the base root directory to the config:
// directories and files as detached copies, symlinks by target.
func (t *treeSet) addBase(root string, cfg *initConfig) error {
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: root filesystem %s: %w", root, err)
	}
	defer unix.Close(rootFD)
	ents, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("sandbox: root filesystem: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if slices.Contains(skippedBase, name) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(rootFD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone meanwhile
			}
			return fmt.Errorf("sandbox: root filesystem: stat %s: %w", filepath.Join(root, name), err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR, unix.S_IFREG:
			kind := "dir"
			if st.Mode&unix.S_IFMT == unix.S_IFREG {
				kind = "file"
			}
			fd, err := cloneTree(rootFD, name, true)
			if err != nil {
				return fmt.Errorf("sandbox: root filesystem %s: %w", root, err)
			}
			cfg.Base = append(cfg.Base, baseEntry{Name: name, Kind: kind, FD: t.add(fd)})
		case unix.S_IFLNK:
			target, err := os.Readlink(filepath.Join(root, name))
			if err != nil {
				return fmt.Errorf("sandbox: root filesystem: %w", err)
			}
			cfg.Base = append(cfg.Base, baseEntry{Name: name, Kind: "symlink", Target: target})
		default:
			// Sockets, fifos and device nodes at the top of the base are
			// left out: /dev is the sandbox's own.
		}
	}
	return nil
}

// addDevices adds copies of the host's device nodes in devices.
func (t *treeSet) addDevices(cfg *initConfig) error {
	for _, name := range devices {
		fd, err := cloneTree(unix.AT_FDCWD, "/dev/"+name, false)
		if err != nil {
			return fmt.Errorf("sandbox: device: %w", err)
		}
		cfg.Devices = append(cfg.Devices, fdEntry{Name: name, FD: t.add(fd)})
	}
	return nil
}

// addWorkspace adds a copy of the workspace tree, id-mapped through the user
// namespace at usernsPath when the filesystem allows it (see the package
// documentation). It returns why the mapping was not applied, "" if it was.
func (t *treeSet) addWorkspace(workspace, usernsPath string, cfg *initConfig) (idmapErr string, err error) {
	fd, err := cloneTree(unix.AT_FDCWD, workspace, true)
	if err != nil {
		return "", fmt.Errorf("sandbox: workspace %s: %w", workspace, err)
	}
	cfg.WorkspaceFD = t.add(fd)
	userns, err := unix.Open(usernsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("sandbox: open the sandbox's user namespace: %w", err)
	}
	defer unix.Close(userns)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
		// The filesystem does not support id-mapped mounts (for FUSE: the
		// server did not offer FUSE_ALLOW_IDMAP). The plain copy stays.
		return fmt.Sprintf("the filesystem of %s refused an id-mapped mount (%v)", workspace, err), nil
	default:
		return "", fmt.Errorf("sandbox: id-map the workspace %s: %w", workspace, err)
	}
}
