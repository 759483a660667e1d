package chunkstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// goldenSnapshot sets every field.
func goldenSnapshot() *Snapshot {
	exp := time.Date(2025, 12, 31, 23, 59, 59, 0, time.UTC)
	return &Snapshot{
		Version:      SnapshotVersion,
		Root:         codecID(10),
		Parents:      []ID{codecID(11), codecID(12)},
		Workspace:    "api-server_2.x",
		Seq:          42,
		Time:         time.Date(2025, 6, 1, 12, 30, 45, 123456789, time.UTC),
		Message:      "turn 42: fix the <flaky> test & retry\nsecond line: ünïcode",
		Labels:       map[string]string{"agent": "claude", "turn": "42", "ticket": "API-7"},
		Host:         "host-b",
		CairnVersion: "0.1.0-dev",
		Provenance:   map[string]string{"argv": `["go","test","./..."]`, "exit_status": "0"},
		Stats: SnapshotStats{Files: 1200, Dirs: 80, Symlinks: 3, Others: 1, Bytes: 1 << 33,
			ChangedFiles: 4, ChangedBytes: 8192, NewBlobs: 7, NewBytes: 5000},
		Changes: []Change{
			{Path: "main.go", Op: ChangeModified, Size: 1234},
			{Path: "new/file.txt", Op: ChangeAdded, Size: 10},
			{Path: "old.txt", Op: ChangeRemoved, Size: 99},
			{Path: "run.sh", Op: ChangeMetadataOnly, Size: 55},
			{Path: "bin/\xff\xfe-latin1", Op: ChangeAdded, Size: 1},
		},
		Excluded: []Exclusion{
			{Path: ".env", Reason: "secret: matches .env"},
			{Path: "cache/\xe9t\xe9", Reason: "policy: excluded cache/"},
		},
		Expires: &exp,
	}
}

func mustEncodeSnapshot(tb testing.TB, s *Snapshot) []byte {
	tb.Helper()
	data, err := EncodeSnapshot(s)
	if err != nil {
		tb.Fatalf("EncodeSnapshot: %v", err)
	}
	return data
}

// snapshotJSON returns a record's decompressed payload.
func snapshotJSON(tb testing.TB, data []byte) []byte {
	tb.Helper()
	js, err := snapshotDecoder().DecodeAll(data[5:], nil)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// wrapSnapshotJSON makes a record of an arbitrary payload.
func wrapSnapshotJSON(js []byte) []byte {
	return snapshotEncoder().EncodeAll(js, []byte("CSNP\x01"))
}

// TestSnapshot_Golden checks both directions against a record written by an
// earlier build: it must still decode to the same Snapshot, and this build
// must write the same JSON. (The compressed bytes may differ across zstd
// library versions; the JSON must not.)
func TestSnapshot_Golden(t *testing.T) {
	const name = "snapshot_v1.golden"
	data := mustEncodeSnapshot(t, goldenSnapshot())
	if updateGolden() {
		checkGolden(t, name, data)
		return
	}
	golden, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("%v (create it with go test ./chunkstore/ -run %s -update)", err, t.Name())
	}
	got, err := DecodeSnapshot(golden)
	if err != nil {
		t.Fatalf("DecodeSnapshot(golden): %v", err)
	}
	if want := goldenSnapshot(); !reflect.DeepEqual(got, want) {
		t.Errorf("golden record decodes to\n%+v\nwant\n%+v", got, want)
	}
	if g, w := snapshotJSON(t, data), snapshotJSON(t, golden); !bytes.Equal(g, w) {
		t.Errorf("snapshot JSON changed (a format change needs a new version):\n got %s\nwant %s", g, w)
	}
}

func TestSnapshot_RoundTrip(t *testing.T) {
	want := goldenSnapshot()
	data := mustEncodeSnapshot(t, want)
	got, err := DecodeSnapshot(data)
	if err != nil {
		t.Fatalf("DecodeSnapshot: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if again := mustEncodeSnapshot(t, got); !bytes.Equal(again, data) {
		t.Error("re-encoding the decoded snapshot gives other bytes")
	}

	t.Run("JSONFields", func(t *testing.T) {
		js := string(snapshotJSON(t, data))
		for _, field := range []string{`"root":"`, `"parents":[`, `"workspace":"api-server_2.x"`, `"seq":42`,
			`"time":"2025-06-01T12:30:45.123456789Z"`, `"message":`, `"labels":{"agent":"claude","ticket":"API-7","turn":"42"}`,
			`"host":"host-b"`, `"cairn_version":"0.1.0-dev"`, `"provenance":{"argv":`, `"changed_files":4`,
			`"new_bytes":5000`, `"op":"modified"`, `"op":"metadata_only"`, `"path_bytes":"`, `"reason":"secret: matches .env"`,
			`"expires":"2025-12-31T23:59:59Z"`} {
			if !strings.Contains(js, field) {
				t.Errorf("JSON lacks %s:\n%s", field, js)
			}
		}
		if strings.Contains(js, `"version"`) {
			t.Errorf("JSON repeats the header's version:\n%s", js)
		}
	})

	t.Run("Minimal", func(t *testing.T) {
		s := &Snapshot{Root: codecID(1), Workspace: "w", Seq: 1, Time: time.Unix(0, 1).UTC()}
		got, err := DecodeSnapshot(mustEncodeSnapshot(t, s))
		if err != nil {
			t.Fatal(err)
		}
		s.Version = SnapshotVersion
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("got %+v, want %+v", got, s)
		}
	})

	t.Run("Deterministic", func(t *testing.T) {
		// Same snapshot, times in another zone, maps built in another
		// order, Version unset: the same bytes.
		s := goldenSnapshot()
		loc := time.FixedZone("UTC+5", 5*3600)
		s.Time = s.Time.In(loc)
		exp := s.Expires.In(loc)
		s.Expires = &exp
		s.Labels = map[string]string{"turn": "42", "ticket": "API-7", "agent": "claude"}
		s.Version = 0
		if got := mustEncodeSnapshot(t, s); !bytes.Equal(got, data) {
			t.Fatal("equal snapshots encode differently")
		}
		if s.Time.Location() != loc {
			t.Fatal("EncodeSnapshot modified its argument")
		}
	})

	t.Run("EmptyCollections", func(t *testing.T) {
		s := &Snapshot{Root: codecID(1), Workspace: "w", Seq: 1, Time: time.Unix(1, 0).UTC(),
			Parents: []ID{}, Labels: map[string]string{}, Changes: []Change{}}
		js := `{"root":"` + codecID(1).String() + `","parents":[],"workspace":"w","seq":1,"time":"1970-01-01T00:00:01Z",` +
			`"labels":{},"provenance":{},"stats":{},"changes":[],"excluded":[]}`
		got, err := DecodeSnapshot(wrapSnapshotJSON([]byte(js)))
		if err != nil {
			t.Fatal(err)
		}
		if got.Parents != nil || got.Labels != nil || got.Provenance != nil || got.Changes != nil || got.Excluded != nil {
			t.Fatalf("empty collections should decode as nil: %+v", got)
		}
		if !bytes.Equal(mustEncodeSnapshot(t, got), mustEncodeSnapshot(t, s)) {
			t.Fatal("empty and nil collections encode differently")
		}
	})
}

func TestSnapshot_Validation(t *testing.T) {
	bad := "\xff"
	tests := []struct {
		name string
		edit func(s *Snapshot)
		want string
	}{
		{"ZeroRoot", func(s *Snapshot) { s.Root = ID{} }, "zero root"},
		{"ZeroParent", func(s *Snapshot) { s.Parents = []ID{codecID(1), {}} }, "parent 1 is the zero ID"},
		{"DuplicateParent", func(s *Snapshot) { s.Parents = []ID{codecID(1), codecID(1)} }, "listed twice"},
		{"EmptyWorkspace", func(s *Snapshot) { s.Workspace = "" }, "empty workspace name"},
		{"BadWorkspace", func(s *Snapshot) { s.Workspace = "a/b" }, `contains '/'`},
		{"SeqZero", func(s *Snapshot) { s.Seq = 0 }, "sequence number 0"},
		{"ZeroTime", func(s *Snapshot) { s.Time = time.Time{} }, "no time"},
		{"Year10000", func(s *Snapshot) { s.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "year outside"},
		{"NegativeYear", func(s *Snapshot) { s.Time = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) }, "year outside"},
		{"ZeroExpiry", func(s *Snapshot) { s.Expires = &time.Time{} }, "no expiry"},
		{"MessageUTF8", func(s *Snapshot) { s.Message = bad }, "message is not valid UTF-8"},
		{"HostUTF8", func(s *Snapshot) { s.Host = bad }, "host is not valid UTF-8"},
		{"VersionUTF8", func(s *Snapshot) { s.CairnVersion = bad }, "cairn version is not valid UTF-8"},
		{"LabelEmptyKey", func(s *Snapshot) { s.Labels = map[string]string{"": "x"} }, "label with an empty key"},
		{"LabelKeyUTF8", func(s *Snapshot) { s.Labels = map[string]string{bad: "x"} }, "label key"},
		{"LabelValueUTF8", func(s *Snapshot) { s.Labels = map[string]string{"k": bad} }, `label "k": value`},
		{"ProvenanceKey", func(s *Snapshot) { s.Provenance = map[string]string{"": "x"} }, "provenance with an empty key"},
		{"ProvenanceValue", func(s *Snapshot) { s.Provenance = map[string]string{"argv": bad} }, `provenance "argv": value`},
		{"ChangeEmptyPath", func(s *Snapshot) { s.Changes = []Change{{Op: ChangeAdded}} }, "change 0 has an empty path"},
		{"ChangeOpZero", func(s *Snapshot) { s.Changes = []Change{{Path: "a"}} }, "invalid op 0"},
		{"ChangeOpBig", func(s *Snapshot) { s.Changes = []Change{{Path: "a", Op: 5}} }, "invalid op 5"},
		{"ExclusionEmptyPath", func(s *Snapshot) { s.Excluded = []Exclusion{{Reason: "r"}} }, "exclusion 0 has an empty path"},
		{"ExclusionNoReason", func(s *Snapshot) { s.Excluded = []Exclusion{{Path: "a"}} }, "has no reason"},
		{"ExclusionReasonUTF8", func(s *Snapshot) { s.Excluded = []Exclusion{{Path: "a", Reason: bad}} }, "reason is not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := goldenSnapshot()
			tt.edit(s)
			_, err := EncodeSnapshot(s)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("EncodeSnapshot: %v; want ErrInvalid containing %q", err, tt.want)
			}
		})
	}
	t.Run("Nil", func(t *testing.T) {
		if _, err := EncodeSnapshot(nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("EncodeSnapshot(nil) = %v, want ErrInvalid", err)
		}
	})
}

func TestValidWorkspaceName(t *testing.T) {
	for _, name := range []string{"a", "A", "0", "_", "api", "my-ws.2_x", "a.", "a-", strings.Repeat("w", 128)} {
		if err := ValidWorkspaceName(name); err != nil {
			t.Errorf("ValidWorkspaceName(%q) = %v, want nil", name, err)
		}
	}
	for _, tt := range []struct{ name, want string }{
		{"", "empty workspace name"},
		{strings.Repeat("w", 129), "129 bytes long"},
		{".hidden", `starts with '.'`},
		{"-flag", `starts with '-'`},
		{".", `starts with '.'`},
		{"..", `starts with '.'`},
		{"a/b", `contains '/' at byte 1`},
		{"a b", `contains ' '`},
		{"a@1", `contains '@'`},
		{"a:b", `contains ':'`},
		{"é", `contains 'é' at byte 0`},
		{"a\xff", `contains byte 0xff at byte 1`},
		{"a\x00", `contains '\x00'`},
	} {
		err := ValidWorkspaceName(tt.name)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ValidWorkspaceName(%q) = %v; want ErrInvalid containing %q", tt.name, err, tt.want)
		}
	}
}

func TestDecodeSnapshot_Corrupt(t *testing.T) {
	good := string(snapshotJSON(t, mustEncodeSnapshot(t, goldenSnapshot())))
	// sizeBomb is a zstd frame whose header claims 2 GiB of content.
	sizeBomb := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0, 0, 0, 0, 0x80, 0, 0, 0, 0, 0x0b, 0, 0, 0}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"Nil", nil, "bad magic"},
		{"Short", []byte("CSN"), "bad magic"},
		{"TreeMagic", []byte("CTRE\x01\x00"), "bad magic"},
		{"VersionZero", []byte("CSNP\x00"), "format version 0"},
		{"NoPayload", []byte("CSNP\x01"), "empty payload"},
		{"NotZstd", []byte("CSNP\x01{\"root\":1}"), "decompress"},
		{"TruncatedZstd", mustEncodeSnapshot(t, goldenSnapshot())[:40], "decompress"},
		{"SizeBomb", append([]byte("CSNP\x01"), sizeBomb...), "claims 2147483648 bytes"},
		{"SizeBombPadded", append(append([]byte("CSNP\x01"), sizeBomb...), make([]byte, 1<<16)...), "larger than 1073741824 bytes"},
		{"NotJSON", wrapSnapshotJSON([]byte("hello")), "JSON"},
		{"JSONArray", wrapSnapshotJSON([]byte("[]")), "JSON"},
		{"JSONNull", wrapSnapshotJSON([]byte("null")), "zero root"},
		{"UnknownField", wrapSnapshotJSON([]byte(strings.Replace(good, `"seq":`, `"extra":1,"seq":`, 1))), "unknown field"},
		{"UnknownChangeField", wrapSnapshotJSON([]byte(strings.Replace(good, `"op":"added"`, `"op":"added","x":1`, 1))), "unknown field"},
		{"Trailing", wrapSnapshotJSON([]byte(good + "{}")), "data after the JSON"},
		{"BadID", wrapSnapshotJSON([]byte(strings.Replace(good, `"root":"`, `"root":"zz`, 1))), "JSON"},
		{"BadOp", wrapSnapshotJSON([]byte(strings.Replace(good, `"op":"added"`, `"op":"created"`, 1))), `unknown change op "created"`},
		{"BadWorkspace", wrapSnapshotJSON([]byte(strings.Replace(good, `"workspace":"api-server_2.x"`, `"workspace":"../x"`, 1))), "starts with '.'"},
		{"SeqZero", wrapSnapshotJSON([]byte(strings.Replace(good, `"seq":42`, `"seq":0`, 1))), "sequence number 0"},
		{"SeqNegative", wrapSnapshotJSON([]byte(strings.Replace(good, `"seq":42`, `"seq":-1`, 1))), "JSON"},
		{"BothPaths", wrapSnapshotJSON([]byte(strings.Replace(good, `"path":"main.go"`, `"path":"main.go","path_bytes":"/w=="`, 1))), "both path and path_bytes"},
		{"PathBytesUTF8", wrapSnapshotJSON([]byte(strings.Replace(good, `"path":"main.go"`, `"path_bytes":"YQ=="`, 1))), "holds valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := DecodeSnapshot(tt.data)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeSnapshot = %+v, %v; want ErrCorrupt containing %q", s, err, tt.want)
			}
		})
	}
	t.Run("Truncated", func(t *testing.T) {
		data := mustEncodeSnapshot(t, goldenSnapshot())
		for n := range len(data) {
			if _, err := DecodeSnapshot(data[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("first %d of %d bytes: %v, want ErrCorrupt", n, len(data), err)
			}
		}
	})
	t.Run("Version", func(t *testing.T) {
		data := mustEncodeSnapshot(t, goldenSnapshot())
		data[4] = 2
		_, err := DecodeSnapshot(data)
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "version 2") || !strings.Contains(err.Error(), "upgrade") {
			t.Fatalf("version 2: %v, want ErrVersion naming the version and saying to upgrade", err)
		}
	})
}

// TestDecodeSnapshot_Lenient: a record is read whatever zstd settings or
// JSON layout wrote it (see the format comment in snapshot.go).
func TestDecodeSnapshot_Lenient(t *testing.T) {
	want := goldenSnapshot()
	js := snapshotJSON(t, mustEncodeSnapshot(t, want))
	var indented bytes.Buffer
	if err := json.Indent(&indented, js, "", "  "); err != nil {
		t.Fatal(err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	got, err := DecodeSnapshot(enc.EncodeAll(indented.Bytes(), []byte("CSNP\x01")))
	if err != nil {
		t.Fatalf("DecodeSnapshot: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestChangeOp_Text(t *testing.T) {
	for op, want := range map[ChangeOp]string{ChangeAdded: "added", ChangeModified: "modified",
		ChangeRemoved: "removed", ChangeMetadataOnly: "metadata_only"} {
		b, err := op.MarshalText()
		if err != nil || string(b) != want || op.String() != want {
			t.Errorf("op %d marshals as %q, %v (String %q); want %q", op, b, err, op.String(), want)
		}
		var back ChangeOp
		if err := back.UnmarshalText(b); err != nil || back != op {
			t.Errorf("UnmarshalText(%q) = %d, %v", b, back, err)
		}
	}
	if _, err := ChangeOp(0).MarshalText(); !errors.Is(err, ErrInvalid) {
		t.Errorf("MarshalText(0) = %v, want ErrInvalid", err)
	}
	var op ChangeOp
	if err := op.UnmarshalText([]byte("Added")); !errors.Is(err, ErrInvalid) {
		t.Errorf("UnmarshalText(Added) = %v, want ErrInvalid", err)
	}
}

// TestSnapshot_Egress: the egress log round-trips; http_intercept is
// written only when set, and a log without it (as records written before
// it existed) still decodes.
func TestSnapshot_Egress(t *testing.T) {
	egress := func(intercept bool) *Snapshot {
		s := goldenSnapshot()
		s.Egress = &Egress{
			Mode: "policy",
			Destinations: []EgressDestination{
				{Addr: "127.0.0.2", Port: 443, Protocol: "tcp", Verdict: "allowed", Count: 2, Names: []string{"a.test"}},
				{Addr: "api.test", Port: 443, Protocol: "https GET", Verdict: "denied", Count: 1},
			},
			DNS:           []EgressQuery{{Name: "a.test", Type: "A", Outcome: "answered", Count: 1}},
			Incomplete:    true,
			HTTPIntercept: intercept,
		}
		return s
	}
	for _, intercept := range []bool{true, false} {
		want := egress(intercept)
		data := mustEncodeSnapshot(t, want)
		got, err := DecodeSnapshot(data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got.Egress, want.Egress)
		}
		if js := string(snapshotJSON(t, data)); strings.Contains(js, `"http_intercept":true`) != intercept || strings.Contains(js, `"http_intercept":false`) {
			t.Errorf("http_intercept %v: JSON %s", intercept, js)
		}
	}
	old := `{"root":"` + codecID(1).String() + `","workspace":"w","seq":1,"time":"1970-01-01T00:00:01Z","stats":{},` +
		`"egress":{"mode":"policy","destinations":[{"addr":"a.test","port":80,"protocol":"http GET","verdict":"allowed","count":1}]}}`
	got, err := DecodeSnapshot(wrapSnapshotJSON([]byte(old)))
	if err != nil {
		t.Fatalf("a record without http_intercept: %v", err)
	}
	if got.Egress == nil || got.Egress.HTTPIntercept || len(got.Egress.Destinations) != 1 {
		t.Errorf("decoded egress %+v", got.Egress)
	}
}
