package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Secret files, init's side. Their content is written to a tmpfs that is
// never attached anywhere (fsopen/fsmount give a detached mount, written
// through its descriptor), and each file is bound from there over its
// destination for the setup phase. Afterwards the binds are detached, the
// placeholders created for missing destinations removed, and the tmpfs,
// referenced by nothing, is freed: nothing of a secret is ever written to
// the workspace or to any other filesystem.

// secretMounts are the setup phase's secret files, in place.
type secretMounts struct {
	binds []string // destinations with a secret bound over them
	ids   []uint64 // the mount IDs of those binds
	files []string // empty placeholders created for missing destinations
	dirs  []string // directories created for them, parents first
}

// mountSecrets puts every secret in place. On error, what is already in
// place is in the returned value, for remove.
func mountSecrets(secrets []secretConfig) (*secretMounts, error) {
	sm := &secretMounts{}
	if len(secrets) == 0 {
		return sm, nil
	}
	size := 64 << 10
	for _, s := range secrets {
		size += len(s.Data) + 4096
	}
	mnt, err := newTmpfs("mode=0700,size="+strconv.Itoa(size),
		unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return sm, fmt.Errorf("secret files: %w", err)
	}
	defer unix.Close(mnt)
	for i, s := range secrets {
		if err := sm.place(mnt, "secret"+strconv.Itoa(i), s); err != nil {
			return sm, fmt.Errorf("secret file %s: %w", s.Dst, err)
		}
	}
	return sm, nil
}

// place writes one secret into the detached tmpfs mnt as name and binds it
// over its destination.
func (sm *secretMounts) place(mnt int, name string, s secretConfig) error {
	fd, err := unix.Openat(mnt, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.Write(s.Data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := unix.Fchmodat(mnt, name, s.Mode&0o777, 0); err != nil {
		return err
	}
	if err := sm.ensureDst(s.Dst); err != nil {
		return err
	}
	tree, err := unix.OpenTree(mnt, name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	// The descriptor must be closed before the bind can be unmounted.
	defer unix.Close(tree)
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, s.Dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("bind over the destination: %w", err)
	}
	sm.binds = append(sm.binds, s.Dst)
	var stx unix.Statx_t
	if err := unix.Statx(tree, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil {
		return fmt.Errorf("statx: %w", err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return fmt.Errorf("statx: %w: no mount ID", ErrNotSupported)
	}
	sm.ids = append(sm.ids, stx.Mnt_id)
	return nil
}

// ensureDst makes sure dst is a file a secret can be bound over, creating
// an empty placeholder (and its missing parents) when it does not exist.
func (sm *secretMounts) ensureDst(dst string) error {
	var st unix.Stat_t
	err := unix.Lstat(dst, &st)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return errors.New("the destination is a directory")
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return errors.New("the destination is a symlink; give its target")
	case err == nil:
		return nil
	case !errors.Is(err, unix.ENOENT):
		return err
	}
	cur := "/"
	for _, comp := range strings.Split(strings.TrimPrefix(path.Dir(dst), "/"), "/") {
		if comp == "" {
			continue
		}
		cur = path.Join(cur, comp)
		err := unix.Mkdir(cur, 0o755)
		if err == nil {
			sm.dirs = append(sm.dirs, cur)
			continue
		}
		if !errors.Is(err, unix.EEXIST) {
			return placeholderErr(cur, err)
		}
	}
	fd, err := unix.Open(dst, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return placeholderErr(dst, err)
	}
	unix.Close(fd)
	sm.files = append(sm.files, dst)
	return nil
}

func placeholderErr(p string, err error) error {
	if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("create %s as a placeholder: %w (a missing destination must be in a writable place: /workspace, /tmp or a persisted path)", p, err)
	}
	return fmt.Errorf("create %s as a placeholder: %w", p, err)
}

// remove detaches every secret and removes the placeholders and the
// directories created for them (those still empty). It then checks, by
// mount ID, that no secret is mounted anywhere any more: an error means one
// may still be visible, and the agent phase must not run.
func (sm *secretMounts) remove() error {
	if sm == nil {
		return nil
	}
	var errs []error
	for i := len(sm.binds) - 1; i >= 0; i-- {
		// UMOUNT_NOFOLLOW: a symlink the setup phase put on the way is not
		// followed; the check below catches a bind moved elsewhere.
		if err := unix.Unmount(sm.binds[i], unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			errs = append(errs, fmt.Errorf("remove secret file %s: %w", sm.binds[i], err))
		}
	}
	if err := checkUnmounted(sm.ids); err != nil {
		errs = append(errs, err)
	}
	sm.binds, sm.ids = nil, nil
	for i := len(sm.files) - 1; i >= 0; i-- {
		if err := removeNoFollow(sm.files[i], 0); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove the placeholder %s: %w", sm.files[i], err))
		}
	}
	sm.files = nil
	for i := len(sm.dirs) - 1; i >= 0; i-- {
		removeNoFollow(sm.dirs[i], unix.AT_REMOVEDIR) // kept if the setup phase put files in it
	}
	sm.dirs = nil
	return errors.Join(errs...)
}

// checkUnmounted fails if a mount of ids is still in the mount namespace.
func checkUnmounted(ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("check the secret files are gone: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		id, _, _ := strings.Cut(line, " ")
		n, err := strconv.ParseUint(id, 10, 64)
		if err == nil && slices.Contains(ids, n) {
			return fmt.Errorf("a secret file is still mounted: %s", line)
		}
	}
	return nil
}

// removeNoFollow removes the absolute path p, resolving its parent without
// following any symlink.
func removeNoFollow(p string, flags int) error {
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	dir, err := openBeneath(root, strings.TrimPrefix(path.Dir(p), "/"), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	return unix.Unlinkat(dir, path.Base(p), flags)
}
