package sandbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// staging is where init assembles the new root, in its own mount namespace:
// a tmpfs over that namespace's copy of the host's /tmp, which nothing else
// uses (the trees arrive as descriptors, so no host path is read after
// this). pivot_root then makes it "/" and the host's tree is detached.
const staging = "/tmp"

// Masked and read-only parts of /proc, as runc and Docker have them.
var (
	procReadOnly    = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}
	procMaskedFiles = []string{"kcore", "keys", "timer_list", "sched_debug", "latency_stats", "timer_stats"}
	procMaskedDirs  = []string{"acpi", "asound", "scsi"}
	sysMaskedDirs   = []string{"firmware", "devices/virtual/powercap"}
)

// Mount attributes of every part of the tree.
const (
	attrBase = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	// Sizes of the small tmpfs mounts: the root (mount points and
	// symlinks), /dev (nodes' mount points), /run and masks (empty).
	smallTmpfs = "size=1m"
)

// buildRoot assembles the sandbox's root from the trees Run sent (fds, as
// indexed by cfg) and switches to it. See the package documentation for the
// resulting mount table.
func buildRoot(cfg *initConfig, fds []int) error {
	defer closeAll(fds)
	take := func(i int) (int, error) {
		if i < 0 || i >= len(fds) || fds[i] < 0 {
			return -1, fmt.Errorf("config names descriptor %d of %d", i, len(fds))
		}
		fd := fds[i]
		fds[i] = -1
		return fd, nil
	}
	// Nothing mounted from here on propagates to the host, nor from it.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", staging, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,"+smallTmpfs); err != nil {
		return fmt.Errorf("mount the new root: %w", err)
	}
	if err := buildBase(cfg.Base, take); err != nil {
		return err
	}
	ws, err := take(cfg.WorkspaceFD)
	if err != nil {
		return err
	}
	if err := attachDir(ws, staging+WorkspaceDir, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		return fmt.Errorf("mount /workspace: %w", err)
	}
	if err := buildDev(cfg, take); err != nil {
		return fmt.Errorf("build /dev: %w", err)
	}
	if err := buildProc(); err != nil {
		return fmt.Errorf("build /proc: %w", err)
	}
	if err := buildSys(); err != nil {
		return fmt.Errorf("build /sys: %w", err)
	}
	tmpOpts := "mode=1777"
	if cfg.TmpSize > 0 {
		tmpOpts += ",size=" + strconv.FormatInt(cfg.TmpSize, 10)
	}
	if err := mountTmpfs(staging+"/tmp", tmpOpts, 0); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	// A fresh, read-only /run with only the run files: the host's holds
	// its daemons' sockets.
	if err := buildRun(cfg.RunFiles); err != nil {
		return fmt.Errorf("build /run: %w", err)
	}
	if err := bindPersisted(cfg.Persist); err != nil {
		return err
	}
	if err := hideReserved(); err != nil {
		return err
	}
	if err := setAttr(staging, false, unix.MOUNT_ATTR_RDONLY); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return switchRoot()
}

// buildBase recreates the base's root entries: directories and files bound
// read-only (recursively: a copy of a mount with submounts must be whole in
// a user namespace), symlinks as they are.
func buildBase(entries []baseEntry, take func(int) (int, error)) error {
	for _, e := range entries {
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.Contains(e.Name, "/") {
			return fmt.Errorf("base entry %q: not a name", e.Name)
		}
		target := staging + "/" + e.Name
		var err error
		switch e.Kind {
		case "dir", "file":
			var fd int
			if fd, err = take(e.FD); err != nil {
				break
			}
			if e.Kind == "dir" {
				err = attachDir(fd, target, attrBase)
			} else {
				err = attachFile(fd, target, attrBase)
			}
		case "symlink":
			err = unix.Symlink(e.Target, target)
		default:
			err = fmt.Errorf("unknown kind %q", e.Kind)
		}
		if err != nil {
			return fmt.Errorf("mount /%s from the root filesystem: %w", e.Name, err)
		}
	}
	return nil
}

// buildDev makes a minimal /dev: the host's null, zero, full, random,
// urandom and tty bound in, a private devpts instance, /dev/shm, and the
// usual symlinks. It is read-only itself, so nothing can be added to it.
func buildDev(cfg *initConfig, take func(int) (int, error)) error {
	dev := staging + "/dev"
	if err := mountTmpfs(dev, "mode=0755,"+smallTmpfs, unix.MS_NOEXEC); err != nil {
		return err
	}
	for _, d := range cfg.Devices {
		if !slices.Contains(devices, d.Name) {
			return fmt.Errorf("device %q is not one the sandbox has", d.Name)
		}
		fd, err := take(d.FD)
		if err != nil {
			return err
		}
		if err := attachFile(fd, dev+"/"+d.Name, 0); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d.Name, err)
		}
	}
	if err := os.Mkdir(dev+"/pts", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	shmOpts := "mode=1777"
	if cfg.TmpSize > 0 {
		shmOpts += ",size=" + strconv.FormatInt(cfg.TmpSize, 10)
	}
	if err := mountTmpfs(dev+"/shm", shmOpts, 0); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	links := [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	for _, l := range links {
		if err := unix.Symlink(l[0], dev+"/"+l[1]); err != nil {
			return err
		}
	}
	return setAttr(dev, false, unix.MOUNT_ATTR_RDONLY)
}

// buildProc mounts a procfs of the sandbox's pid namespace, with the parts
// that reach the kernel read-only and the ones that reveal it masked.
func buildProc() error {
	proc := staging + "/proc"
	if err := os.Mkdir(proc, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount proc: %w", err)
	}
	for _, name := range procReadOnly {
		p := proc + "/" + name
		if !exists(p) {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind /proc/%s: %w", name, err)
		}
		if err := setAttr(p, true, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return fmt.Errorf("make /proc/%s read-only: %w", name, err)
		}
	}
	for _, name := range procMaskedFiles {
		p := proc + "/" + name
		if !exists(p) {
			continue
		}
		if err := unix.Mount(staging+"/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask /proc/%s: %w", name, err)
		}
	}
	for _, name := range procMaskedDirs {
		p := proc + "/" + name
		if !exists(p) {
			continue
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
			"mode=0555,"+smallTmpfs); err != nil {
			return fmt.Errorf("mask /proc/%s: %w", name, err)
		}
	}
	return nil
}

// buildSys mounts a read-only sysfs of the sandbox's network namespace, or,
// where the kernel refuses one, an empty read-only tmpfs.
func buildSys() error {
	sys := staging + "/sys"
	if err := os.Mkdir(sys, 0o555); err != nil {
		return err
	}
	flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("sysfs", sys, "sysfs", flags, ""); err != nil {
		return unix.Mount("tmpfs", sys, "tmpfs", flags, "mode=0555,"+smallTmpfs)
	}
	for _, name := range sysMaskedDirs {
		if !exists(sys + "/" + name) {
			continue
		}
		if err := unix.Mount("tmpfs", sys+"/"+name, "tmpfs", flags, "mode=0555,"+smallTmpfs); err != nil {
			return fmt.Errorf("mask /sys/%s: %w", name, err)
		}
	}
	return nil
}

// bindPersisted binds each persisted path's storage, from the workspace
// (through its id-mapped mount), over the path in the new root. Both sides
// are resolved without following symlinks: the workspace is the agent's.
func bindPersisted(paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	root, err := unix.Open(staging, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	ws, err := unix.Open(staging+WorkspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ws)
	for _, p := range paths {
		if err := bindPersist(root, ws, p); err != nil {
			return fmt.Errorf("persisted path %s: %w", p, err)
		}
	}
	return nil
}

func bindPersist(root, ws int, p string) error {
	src, err := openBeneath(ws, persistRel(p), unix.O_PATH)
	if err != nil {
		return fmt.Errorf("its storage /workspace/%s: %w", persistRel(p), err)
	}
	defer unix.Close(src)
	dst, err := openBeneath(root, strings.TrimPrefix(p, "/"), unix.O_PATH)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return fmt.Errorf("it is, or is beneath, a symlink in the root filesystem: %w", err)
		}
		return fmt.Errorf("its mount point in the root filesystem: %w", err)
	}
	defer unix.Close(dst)
	var sst, dst2 unix.Stat_t
	if err := unix.Fstat(src, &sst); err != nil {
		return err
	}
	if err := unix.Fstat(dst, &dst2); err != nil {
		return err
	}
	if (sst.Mode&unix.S_IFMT == unix.S_IFDIR) != (dst2.Mode&unix.S_IFMT == unix.S_IFDIR) {
		return errors.New("its storage and the root filesystem's path are not of the same type (directory or file)")
	}
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("copy its storage's mount: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("bind it: %w", err)
	}
	return nil
}

// hideReserved covers /workspace/.cairn, when it is a directory, with an
// empty read-only tmpfs: the persisted paths are seen where they are bound,
// not a second time in the workspace.
func hideReserved() error {
	ws, err := unix.Open(staging+WorkspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ws)
	dir, err := openBeneath(ws, ".cairn", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		// Missing, or not a directory: nothing to hide.
		return nil
	}
	defer unix.Close(dir)
	mnt, err := newTmpfs("mode=0555", unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("hide /workspace/.cairn: %w", err)
	}
	defer unix.Close(mnt)
	if err := unix.MoveMount(mnt, "", dir, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("hide /workspace/.cairn: %w", err)
	}
	return nil
}

// switchRoot makes the staging root "/" and detaches the host's tree, so
// that nothing of it is reachable.
func switchRoot() error {
	if err := unix.Chdir(staging); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	// The old root is now mounted over the new one, at ".".
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	return unix.Chdir("/")
}

// attachDir attaches the detached tree fd (closed here) at a new directory
// target and sets attr on the whole tree.
func attachDir(fd int, target string, attr uint64) error {
	defer unix.Close(fd)
	if err := os.Mkdir(target, 0o755); err != nil {
		return err
	}
	return attach(fd, target, attr)
}

// attachFile attaches the detached file mount fd (closed here) at a new
// empty file target and sets attr on it.
func attachFile(fd int, target string, attr uint64) error {
	defer unix.Close(fd)
	f, err := unix.Open(target, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	unix.Close(f)
	return attach(fd, target, attr)
}

func attach(fd int, target string, attr uint64) error {
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	if attr == 0 {
		return nil
	}
	return setAttr(target, true, attr)
}

// setAttr sets mount attributes on the mount at path (and every mount
// beneath it if recursive). Flags the host locked (nosuid, nodev, noexec,
// read-only on a mount inherited from a more privileged namespace) are
// kept: only attributes to add are passed, never any to clear.
func setAttr(path string, recursive bool, attr uint64) error {
	flags := uint(0)
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(unix.AT_FDCWD, path, flags, &unix.MountAttr{Attr_set: attr})
}

// mountTmpfs mounts a tmpfs on a new directory path.
func mountTmpfs(path, opts string, flags uintptr) error {
	if err := os.Mkdir(path, 0o755); err != nil {
		return err
	}
	return unix.Mount("tmpfs", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|flags, opts)
}

// newTmpfs creates a detached tmpfs mount with the options (comma-separated
// key=value) and mount attributes given, and returns its descriptor.
func newTmpfs(opts string, attr int) (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	for _, kv := range strings.Split(opts, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if err := unix.FsconfigSetString(fs, k, v); err != nil {
			return -1, fmt.Errorf("tmpfs option %s: %w", kv, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("create tmpfs: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, attr)
	if err != nil {
		return -1, fmt.Errorf("fsmount tmpfs: %w", err)
	}
	return mnt, nil
}

func exists(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil
}
