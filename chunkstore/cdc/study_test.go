package cdc

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Metadata cost per chunk, in bytes, as cairn stores it: an index entry
// (ID, pack, offset, length) and an entry in the file's chunk list (ID, size).
const (
	indexEntryBytes     = 48
	chunkListEntryBytes = 40
)

// studyFile is one file of a workload; cairn chunks each file separately.
type studyFile struct {
	name string
	data []byte
}

// studyWorkload is a base version of some data and an edited version of it.
type studyWorkload struct {
	name         string
	base, edited []studyFile
}

// BenchmarkParamStudy compares chunk sizes on workspace-like data. For each
// workload and Avg in 16, 32, 64 and 128 KiB (Min = Avg/4, Max = 4*Avg,
// Normalization 2) it ingests the base version into an empty store, then the
// edited version, and reports:
//
//	chunks    chunks in the base version
//	mean-KiB  mean chunk size of the base version
//	meta-%    index + chunk-list bytes for the base version, % of its size
//	new-%     bytes of new chunks stored for the edited version, % of its size
//	edit-KiB  what the edit commit costs: new chunk bytes + index entries of
//	          new chunks + rewritten chunk lists of changed files
//
// Workloads: src is every file under GOROOT/src, then 1% of the files with a
// line inserted; sqlite is a 64 MiB file of 4 KiB pages, then 1% of its pages
// rewritten at random; sqlite-append grows it by 1% new pages instead (plus
// the header and 8 interior pages); build is a Go binary built twice with a
// one-line change; small is the GOROOT/src files under 16 KiB (node_modules-
// like), 1% edited.
//
// Run it with: go test ./chunkstore/cdc -run NONE -bench ParamStudy -benchtime 1x
func BenchmarkParamStudy(b *testing.B) {
	if testing.Short() {
		b.Skip("parameter study reads GOROOT and builds Go binaries; skipped in -short mode")
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skipf("needs the go command to find GOROOT: %v", err)
	}
	srcFiles := readTree(b, filepath.Join(strings.TrimSpace(string(goroot)), "src"))

	rng := rand.New(rand.NewPCG(2026, 1))
	var small []studyFile
	for _, f := range srcFiles {
		if len(f.data) < 16<<10 {
			small = append(small, f)
		}
	}
	workloads := []studyWorkload{
		{"src", srcFiles, editFiles(srcFiles, rng, 0.01)},
		{"sqlite", sqliteBase(64 << 20), nil},
		{"sqlite-append", sqliteBase(64 << 20), nil},
		{"build", nil, nil},
		{"small", small, editFiles(small, rng, 0.01)},
	}
	workloads[1].edited = rewritePages(workloads[1].base, rng, 4096, 0.01)
	workloads[2].edited = appendPages(workloads[2].base, rng, 4096, 0.01)
	workloads[3].base, workloads[3].edited = buildTwice(b)

	for _, w := range workloads {
		if w.base == nil {
			continue
		}
		for _, avgKiB := range []int{16, 32, 64, 128} {
			p := Params{Min: avgKiB << 10 / 4, Avg: avgKiB << 10, Max: avgKiB << 10 * 4, Normalization: 2}
			c := mustCutter(b, p)
			b.Run(fmt.Sprintf("%s/avg=%dKiB", w.name, avgKiB), func(b *testing.B) {
				var base, edit ingestStats
				for b.Loop() {
					st := map[[32]byte]bool{}
					base = ingest(c, st, w.base)
					edit = ingest(c, st, w.edited)
				}
				b.ReportMetric(float64(base.chunks), "chunks")
				b.ReportMetric(float64(base.bytes)/float64(base.chunks)/1024, "mean-KiB")
				b.ReportMetric(100*float64(base.chunks*(indexEntryBytes+chunkListEntryBytes))/float64(base.bytes), "meta-%")
				b.ReportMetric(100*float64(edit.newBytes)/float64(edit.bytes), "new-%")
				cost := edit.newBytes + int64(edit.newChunks*indexEntryBytes+edit.changedListEntries*chunkListEntryBytes)
				b.ReportMetric(float64(cost)/1024, "edit-KiB")
				b.ReportMetric(0, "ns/op") // run time is not the point here
			})
		}
	}
}

type ingestStats struct {
	bytes, newBytes    int64
	chunks, newChunks  int
	changedListEntries int // chunk-list entries of files with a new chunk
}

// ingest chunks every file of ds and adds unseen chunks to the store st.
func ingest(c *Cutter, st map[[32]byte]bool, ds []studyFile) ingestStats {
	var s ingestStats
	for _, f := range ds {
		n, changed := 0, false
		for d := f.data; len(d) > 0; n++ {
			k := c.Cut(d)
			id := sha256.Sum256(d[:k])
			if !st[id] {
				st[id] = true
				s.newBytes += int64(k)
				s.newChunks++
				changed = true
			}
			d = d[k:]
		}
		s.bytes += int64(len(f.data))
		s.chunks += n
		if changed {
			s.changedListEntries += n
		}
	}
	return s
}

// readTree reads every regular file under dir, in lexical order.
func readTree(tb testing.TB, dir string) []studyFile {
	tb.Helper()
	var files []studyFile
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files = append(files, studyFile{path, data})
		return nil
	})
	if err != nil {
		tb.Fatalf("read %s: %v", dir, err)
	}
	if len(files) == 0 {
		tb.Fatalf("no files under %s", dir)
	}
	return files
}

// editFiles returns a copy of files where a fraction of them, chosen at
// random, have a line inserted at a random line boundary.
func editFiles(files []studyFile, rng *rand.Rand, fraction float64) []studyFile {
	out := append([]studyFile(nil), files...)
	for range max(1, int(fraction*float64(len(files)))) {
		i := rng.IntN(len(out))
		d := out[i].data
		pos := rng.IntN(len(d) + 1)
		if nl := bytes.IndexByte(d[pos:], '\n'); nl >= 0 {
			pos += nl + 1
		} else {
			pos = len(d)
		}
		e := make([]byte, 0, len(d)+64)
		e = append(e, d[:pos]...)
		e = append(e, "\tlog.Printf(\"agent edit %d\", n) // inserted\n"...)
		e = append(e, d[pos:]...)
		out[i].data = e
	}
	return out
}

// sqliteBase returns one file of size bytes made of 4 KiB pages of random
// content, standing in for a SQLite database.
func sqliteBase(size int) []studyFile {
	return []studyFile{{"db.sqlite", randBytes(77, size)}}
}

// rewritePages returns a copy of the single file in files with a fraction of
// its pages, chosen at random, overwritten in place with new content.
func rewritePages(files []studyFile, rng *rand.Rand, page int, fraction float64) []studyFile {
	d := bytes.Clone(files[0].data)
	pages := len(d) / page
	for range int(fraction * float64(pages)) {
		i := rng.IntN(pages)
		copy(d[i*page:(i+1)*page], randBytes(rng.Uint64(), page))
	}
	return []studyFile{{files[0].name, d}}
}

// appendPages returns a copy of the single file in files grown by a fraction
// of new pages at the end, with page 1 (the header, whose change counter
// SQLite bumps on every write transaction) and 8 random interior pages (the
// B-tree pages above the new leaves) rewritten: an insert-heavy transaction.
func appendPages(files []studyFile, rng *rand.Rand, page int, fraction float64) []studyFile {
	d := bytes.Clone(files[0].data)
	pages := len(d) / page
	copy(d[24:28], []byte{1, 2, 3, 4})
	for range 8 {
		i := rng.IntN(pages)
		copy(d[i*page:(i+1)*page], randBytes(rng.Uint64(), page))
	}
	d = append(d, randBytes(rng.Uint64(), int(fraction*float64(pages))*page)...)
	return []studyFile{{files[0].name, d}}
}

// buildTwice builds a small program with net/http and encoding/json twice,
// with a one-line change in between, and returns the two binaries.
func buildTwice(b *testing.B) (base, edited []studyFile) {
	b.Helper()
	dir := b.TempDir()
	const prog = `package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "version": version})
	})
	fmt.Fprintln(os.Stderr, "listening")
	_ = http.ListenAndServe("127.0.0.1:0", nil)
}
`
	var bins [2][]byte
	for i, version := range []string{"v1", "v2-edited"} {
		src := prog + fmt.Sprintf("\nconst version = %q\n", version)
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("go", "build", "-trimpath", "-o", "app", "main.go")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOPROXY=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Skipf("go build failed, skipping the build workload: %v\n%s", err, out)
		}
		bin, err := os.ReadFile(filepath.Join(dir, "app"))
		if err != nil {
			b.Fatal(err)
		}
		bins[i] = bin
	}
	return []studyFile{{"app", bins[0]}}, []studyFile{{"app", bins[1]}}
}
