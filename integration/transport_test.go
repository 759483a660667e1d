package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/testenv"
)

// transportStatus is what `cairn status --json` says of a mount's
// transport.
type transportStatus struct {
	Transport         string `json:"transport"`
	TransportQueues   int    `json:"transport_queues"`
	TransportFallback string `json:"transport_fallback"`
	RingRequests      uint64 `json:"ring_requests"`
}

func (in *instance) transport(ws string) transportStatus {
	in.t.Helper()
	var out []transportStatus
	if err := json.Unmarshal([]byte(in.must("status", "--json", ws)), &out); err != nil || len(out) != 1 {
		in.t.Fatalf("status --json %s: %v (%d mounts)", ws, err, len(out))
	}
	return out[0]
}

// A mount served through io_uring (--fuse-transport=uring) works and says
// so in `cairn status`; it unmounts cleanly.
func TestTransport_URing(t *testing.T) {
	testenv.NeedFUSEURing(t)
	in := newInstance(t)
	dir := in.mount("ring", "--fuse-transport=uring")
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(dir, "f"+string(rune('a'+i%26))+string(rune('0'+i/26))), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ts := in.transport("ring")
	if ts.Transport != "io_uring" || ts.TransportQueues < 1 || ts.RingRequests < 100 {
		t.Errorf("status: %+v, want io_uring with queues and at least 100 requests through the ring", ts)
	}
	if out := in.must("status", "ring"); !strings.Contains(out, "ring: FUSE over io_uring (") {
		t.Errorf("status does not say io_uring:\n%s", out)
	}
	in.must("unmount", "ring")
	if isMounted(dir) {
		t.Errorf("%s is still mounted", dir)
	}
}

// Without FUSE over io_uring in the kernel (enable_uring N), auto (the
// default) mounts through /dev/fuse and status says why; uring refuses
// with one line.
func TestTransport_Fallback(t *testing.T) {
	testenv.NoFUSEURing(t)
	in := newInstance(t)
	in.mount("auto", "--fuse-transport=auto")
	ts := in.transport("auto")
	if ts.Transport != "/dev/fuse" || ts.TransportQueues != 0 || !strings.Contains(ts.TransportFallback, "enable_uring is N") {
		t.Errorf("status: %+v, want /dev/fuse saying enable_uring is N", ts)
	}
	// auto is the default.
	in.mount("default")
	if ts := in.transport("default"); ts.Transport != "/dev/fuse" || !strings.Contains(ts.TransportFallback, "enable_uring is N") {
		t.Errorf("status of a mount without --fuse-transport: %+v, want auto's fallback to /dev/fuse", ts)
	}
	if out := in.must("status", "auto"); !strings.Contains(out, "auto: FUSE over /dev/fuse (") {
		t.Errorf("status does not say /dev/fuse:\n%s", out)
	}

	dir := shortTempDir(t)
	r := in.run("mount", "--fuse-transport=uring", "refused", dir)
	if r.code == 0 {
		in.t.Cleanup(func() { in.cleanupMount("refused", dir) })
		t.Fatalf("mount --fuse-transport=uring without io_uring succeeded")
	}
	msg := strings.TrimSpace(r.stderr)
	if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "enable_uring is N") || !strings.Contains(msg, "--fuse-transport=auto") {
		t.Errorf("refusal is not one line that says why and what to do:\n%s", r.stderr)
	}
	if isMounted(dir) {
		t.Errorf("a refused mount stayed at %s", dir)
	}
	r = in.run("mount", "--fuse-transport=ring", "bad", shortTempDir(t))
	if r.code == 0 || !strings.Contains(r.stderr, "want auto, uring or dev") {
		t.Errorf("a bad --fuse-transport: exit %d, %s", r.code, r.stderr)
	}
}
