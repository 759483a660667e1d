package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A daemon never makes a request into its own mount: if its FUSE server
// died (SIGKILL) while one of its own threads waited on such a request,
// the kernel would wait for an answer forever, the thread could not exit,
// the process would keep /dev/fuse open, and so nothing would end the
// connection (a zombie stuck in D state; see issue 15). What needs the
// kernel (syncfs, opening the mount) runs in a helper process, which the
// kernel frees when the daemon dies: closing the daemon's /dev/fuse aborts
// the connection.

// syncfsEnv names the directory a syncfs helper process (the cairn binary
// started by a daemon) syncs. See MaybeSyncfs.
const syncfsEnv = "CAIRN_SYNCFS_HELPER"

// MaybeSyncfs is the syncfs helper's entry point. When this process was
// started as one by a daemon, it calls syncfs(2) on the mount point it was
// given and exits (status 0, or 1 with the error on stderr); else it
// returns at once. A binary that runs daemons (Run) calls it first thing in
// main.
func MaybeSyncfs() {
	dir, ok := os.LookupEnv(syncfsEnv)
	if !ok {
		return
	}
	f, err := os.Open(dir)
	if err == nil {
		err = unix.Syncfs(int(f.Fd()))
		f.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "syncfs %s: %v\n", dir, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// syncfsHelperTimeout bounds a syncfs helper: a flush of the kernel's
// dirty pages of the mount, sent to this daemon.
const syncfsHelperTimeout = 10 * time.Minute

// syncfsHelper syncs the filesystem mounted at dir from a helper process
// (this binary, see MaybeSyncfs), so that no thread of the daemon waits on
// its own mount. The helper dies with the daemon (parent-death signal).
func syncfsHelper(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, syncfsHelperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Env = []string{syncfsEnv + "=" + dir}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("%s: %w", msg, err)
		}
		return fmt.Errorf("syncfs helper: %w", err)
	}
	return nil
}

// flushKernel makes every write the kernel acknowledged on the mount
// reach the journal. Writes through FUSE passthrough land in the staging
// files themselves, and writes through the daemon are written through
// (no writeback cache): only pages dirtied through a shared mapping of a
// file opened for writing without passthrough can still be in the
// kernel, and only while that file is open. With none open there is
// nothing to flush and no syncfs at all; else a helper process syncs the
// mount.
func (d *daemon) flushKernel(ctx context.Context) error {
	if !d.fs.KernelMayHoldWrites() {
		return nil
	}
	if err := syncfsHelper(ctx, d.dir); err != nil {
		return fmt.Errorf("syncfs %s: %w", d.dir, err)
	}
	return nil
}

// mountAt returns the type and device ("major:minor") of the mount at dir,
// from /proc/self/mountinfo (reading it makes no request to the mount).
// The last mount at dir is the visible one.
func mountAt(dir string) (typ, dev string, ok bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, found := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !found || len(f) < 5 || unescapeMount(f[4]) != dir {
			continue
		}
		if pf := strings.Fields(post); len(pf) > 0 {
			typ, dev, ok = pf[0], f[2], true
		}
	}
	return typ, dev, ok
}

// connOf returns the FUSE connection of a mount's device: its number in
// /sys/fs/fuse/connections is the device's minor (FUSE mounts have major
// 0).
func connOf(dev string) (uint64, bool) {
	major, minor, ok := strings.Cut(dev, ":")
	if !ok || major != "0" {
		return 0, false
	}
	n, err := strconv.ParseUint(minor, 10, 32)
	return n, err == nil
}

// fuseConnections is where the fusectl filesystem lists FUSE connections.
const fuseConnections = "/sys/fs/fuse/connections"

// abortConn aborts FUSE connection n through fusectl (mounting fusectl at
// its usual place if nothing is mounted there): every request waiting on
// it fails with ENOTCONN, and so does every later one, in every mount
// namespace that holds a copy of the mount. A connection that is gone
// already is no error.
func abortConn(n uint64) error {
	dir := filepath.Join(fuseConnections, strconv.FormatUint(n, 10))
	if _, err := os.Stat(filepath.Join(dir, "abort")); errors.Is(err, os.ErrNotExist) {
		if typ, _, _ := mountAt(fuseConnections); typ != "fusectl" {
			if err := unix.Mount("fusectl", fuseConnections, "fusectl", 0, ""); err != nil {
				return fmt.Errorf("mount fusectl at %s: %w", fuseConnections, err)
			}
		}
	}
	err := os.WriteFile(filepath.Join(dir, "abort"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the connection ended already
	}
	return err
}
