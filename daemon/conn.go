package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	cfs "github.com/cairnfs/cairn/fs"
)

// A daemon never makes a request into its own mount: if its FUSE server
// died (SIGKILL) while one of its own threads waited on such a request,
// the kernel would wait for an answer forever, the thread could not exit,
// the process would keep /dev/fuse open, and so nothing would end the
// connection (a zombie stuck in D state; see issue 15). What needs the
// kernel (flushing written pages, opening the mount) runs in a helper
// process, which the kernel frees when the daemon dies: closing the
// daemon's /dev/fuse aborts the connection.

// flushEnv names the mount point a flush helper process (the cairn binary
// started by a daemon) flushes. See MaybeFlushHelper.
const flushEnv = "CAIRN_FLUSH_HELPER"

// MaybeFlushHelper is the flush helper's entry point. When this process
// was started as one by a daemon, it reads the inodes to flush from stdin
// (one "nodeid generation" line each), makes the kernel write back each
// one's dirty pages and waits until the daemon has answered every WRITE
// (fs.WaitWriteback), and exits (status 0, or 1 with the error on
// stderr); else it returns at once. A binary that runs daemons (Run)
// calls it first thing in main.
//
// syncfs(2) is not enough: the kernel's FUSE (Linux 6.18 at least) sends
// the WRITEs of the pages it writes back as background requests and
// returns from syncfs without waiting for their answers, sometimes before
// the daemon has read them. fsync(2) of the file waits for them.
func MaybeFlushHelper() {
	dir, ok := os.LookupEnv(flushEnv)
	if !ok {
		return
	}
	if err := flushInodes(dir, os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// flushInodes flushes the inodes listed in r of the mount at dir
// (fs.WaitWriteback), each in turn.
func flushInodes(dir string, r io.Reader) error {
	mnt, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer mnt.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var n cfs.KernelInode
		if _, err := fmt.Sscan(sc.Text(), &n.NodeID, &n.Generation); err != nil {
			return fmt.Errorf("inode %q: %w", sc.Text(), err)
		}
		if err := cfs.WaitWriteback(mnt, n); err != nil {
			return err
		}
	}
	return sc.Err()
}

// flushHelperTimeout bounds a flush helper: the kernel's write-back of
// the dirty pages of the mount, sent to this daemon.
const flushHelperTimeout = 10 * time.Minute

// flushHelper flushes inodes of the daemon's mount from a helper process (this binary, see MaybeFlushHelper), so that no thread of
// the daemon waits on its own mount. The helper dies with the daemon
// (parent-death signal). It is declared to the file system (FlushHelper)
// before it gets the inodes, and so before its first request.
func (d *daemon) flushHelper(ctx context.Context, inodes []cfs.KernelInode) error {
	ctx, cancel := context.WithTimeout(ctx, flushHelperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Env = []string{flushEnv + "=" + d.dir}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("flush helper: %w", err)
	}
	defer d.fs.FlushHelper(cmd.Process.Pid)()
	w := bufio.NewWriter(stdin)
	for _, n := range inodes {
		fmt.Fprintf(w, "%d %d\n", n.NodeID, n.Generation)
	}
	werr := w.Flush()
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("%s: %w", msg, err)
		}
		return fmt.Errorf("flush helper: %w", err)
	}
	if werr != nil {
		return fmt.Errorf("flush helper: %w", werr)
	}
	return nil
}

// flushKernel makes every write the kernel acknowledged on the mount
// reach the journal. Writes through FUSE passthrough land in the staging
// files themselves, and writes through the daemon are written through
// (no writeback cache): only pages dirtied through a shared mapping of a
// file opened for writing without passthrough can still be in the
// kernel, and only while that file is open. With none open there is
// nothing to flush and no helper at all; else a helper process fsyncs
// each such file.
func (d *daemon) flushKernel(ctx context.Context) error {
	inodes := d.fs.KernelMayHoldWrites()
	if len(inodes) == 0 {
		return nil
	}
	if err := d.flushHelper(ctx, inodes); err != nil {
		return fmt.Errorf("flush the kernel's writes to %s: %w", d.dir, err)
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
