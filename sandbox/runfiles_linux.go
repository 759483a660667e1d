package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// buildRun mounts the sandbox's /run: a fresh tmpfs holding only the run
// files (Spec.RunFiles), made read-only once they are written. Without
// files it is an empty read-only tmpfs. The paths were checked by
// Validate (clean, below /run, none inside another); init creates them in
// a tmpfs it has just mounted, which holds nothing else: no symlink can be
// on the way.
func buildRun(files []secretConfig) error {
	dir := staging + RunDir
	opts := "mode=0755," + smallTmpfs
	if len(files) > 0 {
		size := 64 << 10
		for _, f := range files {
			size += len(f.Data) + 4096*(1+strings.Count(f.Dst, "/"))
		}
		opts = "mode=0755,size=" + strconv.Itoa(size)
	}
	if err := mountTmpfs(dir, opts, unix.MS_NOEXEC); err != nil {
		return err
	}
	for _, f := range files {
		rel, ok := strings.CutPrefix(f.Dst, RunDir+"/")
		if !ok || rel == "" || path.Clean(f.Dst) != f.Dst || f.Mode&^0o777 != 0 {
			return fmt.Errorf("run file %q: not a clean path below %s with permission bits only", f.Dst, RunDir)
		}
		if err := writeRunFile(dir, rel, f); err != nil {
			return fmt.Errorf("run file %s: %w", f.Dst, err)
		}
	}
	return setAttr(dir, false, unix.MOUNT_ATTR_RDONLY)
}

// writeRunFile creates dir/rel with f's content and mode, and the missing
// directories on the way (0755).
func writeRunFile(dir, rel string, f secretConfig) error {
	if parent := path.Dir(rel); parent != "." {
		if err := os.MkdirAll(dir+"/"+parent, 0o755); err != nil {
			return err
		}
	}
	fd, err := unix.Open(dir+"/"+rel, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	file := os.NewFile(uintptr(fd), rel)
	_, err = file.Write(f.Data)
	if err == nil {
		err = unix.Fchmod(fd, f.Mode) // not subject to the umask
	}
	return errors.Join(err, file.Close())
}
