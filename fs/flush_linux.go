package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fileIDIno64Gen is the type of the file handles the kernel's FUSE makes
// (FILEID_INO64_GEN): the node ID, high word then low word, and the
// generation, each a native-endian 32-bit word.
const fileIDIno64Gen = 0x81

// WaitWriteback makes the kernel write back the pages of inode n of the
// FUSE mount whose root mount is open, and waits until the server has
// answered every WRITE of them: it opens the inode by its file handle
// (open_by_handle_at(2), which finds an inode the kernel holds without
// asking the server; needs CAP_DAC_READ_SEARCH) and fsyncs it. An inode
// the kernel no longer holds (its files were closed and unmapped, which
// wrote its pages back) is no error.
//
// It makes requests to the mount: a FUSE server calls it from another
// process only, never from one of its own threads.
func WaitWriteback(mount *os.File, n KernelInode) error {
	var raw [12]byte
	binary.NativeEndian.PutUint32(raw[0:], uint32(n.NodeID>>32))
	binary.NativeEndian.PutUint32(raw[4:], uint32(n.NodeID))
	binary.NativeEndian.PutUint32(raw[8:], uint32(n.Generation))
	fd, err := unix.OpenByHandleAt(int(mount.Fd()), unix.NewFileHandle(fileIDIno64Gen, raw[:]), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY)
	if errors.Is(err, unix.ESTALE) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open inode %d by its handle: %w", n.NodeID, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync inode %d: %w", n.NodeID, err)
	}
	return nil
}
