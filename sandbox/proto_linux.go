package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// sendFDs sends every descriptor in fds over the SOCK_SEQPACKET socket
// sock, in as many messages as SCM_RIGHTS needs; each message carries the
// total count so the receiver knows when it has them all.
func sendFDs(sock int, fds []int) error {
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], uint32(len(fds)))
	for first := true; first || len(fds) > 0; first = false {
		n := min(len(fds), maxFDsPerMsg)
		var oob []byte
		if n > 0 {
			oob = unix.UnixRights(fds[:n]...)
		}
		if err := unix.Sendmsg(sock, hdr[:], oob, nil, 0); err != nil {
			return fmt.Errorf("send descriptors: %w", err)
		}
		fds = fds[n:]
	}
	return nil
}

// recvFDs receives the descriptors sendFDs sent, all close-on-exec.
func recvFDs(sock int) ([]int, error) {
	var fds []int
	buf := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(maxFDsPerMsg*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("receive descriptors: %w", err)
		}
		if n == 0 {
			closeAll(fds)
			return nil, fmt.Errorf("receive descriptors: %w", io.ErrUnexpectedEOF)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("receive descriptors: %w", err)
		}
		for i := range msgs {
			got, err := unix.ParseUnixRights(&msgs[i])
			if err != nil {
				closeAll(fds)
				return nil, fmt.Errorf("receive descriptors: %w", err)
			}
			fds = append(fds, got...)
		}
		if flags&unix.MSG_CTRUNC != 0 || n != 4 {
			closeAll(fds)
			return nil, errors.New("receive descriptors: message truncated")
		}
		want := int(binary.LittleEndian.Uint32(buf))
		if len(fds) == want {
			return fds, nil
		}
		if len(fds) > want {
			closeAll(fds)
			return nil, fmt.Errorf("receive descriptors: got %d, expected %d", len(fds), want)
		}
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// sealedMemfd returns a close-on-exec memfd holding data, sealed against any
// change, positioned at its start.
func sealedMemfd(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd seals: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	return f, nil
}

// readJSONFD decodes the JSON document in the file at fd and closes it.
func readJSONFD(fd int, v any) error {
	f := os.NewFile(uintptr(fd), "config")
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// sendReport sends one report over the socket.
func sendReport(sock int, r report) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(data) > maxReportSize {
		r.Msg = r.Msg[:min(len(r.Msg), maxReportSize/2)] + "..."
		if data, err = json.Marshal(r); err != nil {
			return err
		}
	}
	_, err = unix.Write(sock, data)
	return err
}

// readReports reads reports from the socket until EOF (the peer's last
// descriptor closed) and sends each on out, which it closes at the end.
func readReports(sock int, out chan<- report) {
	defer close(out)
	buf := make([]byte, maxReportSize+1024)
	for {
		n, err := unix.Read(sock, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		var r report
		if json.Unmarshal(buf[:n], &r) == nil {
			out <- r
		}
	}
}
