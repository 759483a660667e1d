package fs

import (
	"testing"

	"github.com/cairnfs/cairn/journal"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// mountRaw mounts raw (an FS wrapped by a test) at a new temporary
// directory, unmounts it and closes j at the end of the test, and returns
// the directory and the server.
func mountRaw(t *testing.T, raw fuse.RawFileSystem, opts Options, j *journal.Journal) (string, *Server) {
	t.Helper()
	dir := t.TempDir()
	srv, err := mount(dir, raw, opts, "cairn-test")
	if err != nil {
		j.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		srv.Wait()
		j.Close()
	})
	return dir, srv
}
