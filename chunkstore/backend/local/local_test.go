package local

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/backendtest"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := Open(t.TempDir(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	})
}

func TestOpenMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	if _, err := Open(dir, Options{}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Open(missing) err = %v, want ErrNotFound", err)
	}
	if _, err := Open(dir, Options{Create: true}); err != nil {
		t.Fatalf("Open(Create) err = %v", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("Create did not make the directory: %v", err)
	}
}

func TestOpenFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f, Options{}); err == nil {
		t.Fatal("Open of a regular file succeeded")
	}
}

func TestReservedNames(t *testing.T) {
	b, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{".cairn-lock", "a/.tmp-123"} {
		if _, err := b.Put(context.Background(), key, bytes.NewReader(nil), backend.Condition{}); !errors.Is(err, backend.ErrInvalidKey) {
			t.Errorf("Put(%q) err = %v, want ErrInvalidKey", key, err)
		}
	}
}

// A failed put leaves no temporary file behind and lists nothing.
func TestNoLeftovers(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(context.Background(), "refs/x", bytes.NewReader([]byte("a")), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(context.Background(), "refs/x", bytes.NewReader([]byte("b")), backend.Condition{IfNoneMatch: true}); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("err = %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "refs"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "x" {
		t.Fatalf("refs/ holds %v, want only x", entries)
	}
}
