package chunkstore

// Snapshot record format, version 1, stored as the object snapshots/<id>
// where id is the keyed hash of these bytes:
//
//	magic    4 bytes  "CSNP"
//	version  1 byte   1 (a higher version is ErrVersion: a newer cairn wrote it)
//	payload  one zstd frame (with content size and checksum) holding the
//	         Snapshot as JSON: snake_case field names (see the struct tags),
//	         IDs in lowercase hex, times in UTC RFC 3339 with nanoseconds,
//	         map keys sorted, empty optional fields omitted. At most 1 GiB
//	         decompressed.
//
// EncodeSnapshot is deterministic (same Snapshot, same cairn build: same
// bytes), but unlike trees the record is not canonical: DecodeSnapshot
// accepts any zstd stream and any JSON layout that decodes to a valid
// Snapshot, so that a change in the compressor's output or the JSON
// encoder's escaping never makes old records unreadable. It refuses unknown
// fields and trailing data.
//
// JSON strings must be valid UTF-8, which file names need not be: a Change or
// Exclusion path that is not valid UTF-8 is written as "path_bytes" (base64)
// instead of "path". Other strings (message, labels, host, provenance,
// reasons) must be valid UTF-8: EncodeSnapshot refuses rather than mangle
// them.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
)

const (
	snapshotMagic = "CSNP"

	// SnapshotVersion is the snapshot record format version this build
	// writes and reads.
	SnapshotVersion = 1

	// snapshotMaxJSON bounds a record's decompressed size, so a corrupt or
	// hostile record cannot make the decoder allocate without limit.
	snapshotMaxJSON = 1 << 30

	workspaceNameMax = 128
)

// RootAttr is the root directory's own stat data in a snapshot.
type RootAttr struct {
	Mode   uint32  `json:"mode"` // permission bits incl. suid/sgid/sticky
	UID    uint32  `json:"uid"`
	GID    uint32  `json:"gid"`
	Atime  int64   `json:"atime"` // ns since the Unix epoch
	Mtime  int64   `json:"mtime"`
	Ctime  int64   `json:"ctime"`
	Xattrs []Xattr `json:"xattrs,omitempty"`
}

// Snapshot is an immutable record of one state of a workspace.
type Snapshot struct {
	// Version is the record's format version: set by DecodeSnapshot,
	// ignored by EncodeSnapshot (which writes SnapshotVersion).
	Version int `json:"-"`
	// Root is the ID of the root directory's tree (non-zero).
	Root ID `json:"root"`
	// RootAttr holds the root directory's own attributes, which no tree
	// entry carries.
	RootAttr RootAttr `json:"root_attr"`
	// NextIno is above every inode number the snapshot's trees use, so a
	// workspace opened on it can number new inodes without loading every
	// tree first. Zero in records that predate it.
	NextIno uint64 `json:"next_ino,omitempty"`
	// Parents are the IDs of the parent snapshot records (non-zero,
	// distinct), first parent first; none for a workspace's first snapshot.
	Parents []ID `json:"parents,omitempty"`
	// Workspace is the name of the workspace (see ValidWorkspaceName).
	Workspace string `json:"workspace"`
	// Seq is the workspace's Nth snapshot, 1-based.
	Seq uint64 `json:"seq"`
	// Time is when the snapshot was taken; encoded in UTC with nanoseconds,
	// years 0..9999, not the zero time.
	Time time.Time `json:"time"`
	// Message is the user's description (cairn snapshot -m).
	Message string `json:"message,omitempty"`
	// Labels are key=value tags; keys are non-empty.
	Labels map[string]string `json:"labels,omitempty"`
	// Host is the name of the machine that took the snapshot.
	Host string `json:"host,omitempty"`
	// CairnVersion is the version of cairn that took the snapshot.
	CairnVersion string `json:"cairn_version,omitempty"`
	// Provenance is free-form: argv, exit status and the like. Keys are
	// non-empty.
	Provenance map[string]string `json:"provenance,omitempty"`
	// Stats summarise the snapshot and the commit that made it.
	Stats SnapshotStats `json:"stats"`
	// Changes lists what changed since the first parent. A long list is
	// kept out of the record, in a blob (ChangesBlob): Store.PutSnapshot
	// moves it there and Store.Changes reads it back, so that reading a
	// record stays cheap however large the commit was.
	Changes []Change `json:"changes,omitempty"`
	// ChangesBlob is the KindChanges blob holding the change list when it
	// is not inline; ChangesCount is its length.
	ChangesBlob  ID     `json:"changes_blob,omitzero"`
	ChangesCount uint64 `json:"changes_count,omitempty"`
	// Excluded lists what a policy left out of the snapshot (never silent).
	Excluded []Exclusion `json:"excluded,omitempty"`
	// Egress is what the turn's sandbox contacted under its egress policy
	// (cairn run); nil for other snapshots.
	Egress *Egress `json:"egress,omitempty"`
	// Expires is when retention may delete the snapshot; nil: never.
	Expires *time.Time `json:"expires,omitempty"`
}

// SnapshotStats summarise a snapshot (counts over the whole tree) and the
// commit that made it (changes and new data).
type SnapshotStats struct {
	Files        uint64 `json:"files"`         // regular files (each hardlinked inode once)
	Dirs         uint64 `json:"dirs"`          // directories, including the root
	Symlinks     uint64 `json:"symlinks"`      // symbolic links
	Others       uint64 `json:"others"`        // FIFOs, sockets, devices
	Bytes        uint64 `json:"bytes"`         // logical bytes: the sum of regular file sizes
	ChangedFiles uint64 `json:"changed_files"` // files added, modified or removed
	ChangedBytes uint64 `json:"changed_bytes"` // logical bytes of added and modified files
	NewBlobs     uint64 `json:"new_blobs"`     // blobs this commit stored
	NewBytes     uint64 `json:"new_bytes"`     // stored (compressed) bytes of those blobs
}

// ChangeOp is the kind of a Change. It marshals as "added", "modified",
// "removed" or "metadata_only".
type ChangeOp uint8

const (
	ChangeAdded        ChangeOp = 1 // the path did not exist before
	ChangeModified     ChangeOp = 2 // content changed
	ChangeRemoved      ChangeOp = 3 // the path no longer exists
	ChangeMetadataOnly ChangeOp = 4 // mode, owner, times or xattrs changed, content did not
)

var changeOpNames = [...]string{"", "added", "modified", "removed", "metadata_only"}

// Valid reports whether op is a known operation.
func (op ChangeOp) Valid() bool { return op >= ChangeAdded && op <= ChangeMetadataOnly }

func (op ChangeOp) String() string {
	if op.Valid() {
		return changeOpNames[op]
	}
	return fmt.Sprintf("changeop(%d)", uint8(op))
}

// MarshalText implements encoding.TextMarshaler.
func (op ChangeOp) MarshalText() ([]byte, error) {
	if !op.Valid() {
		return nil, fmt.Errorf("%w: change op %d", ErrInvalid, uint8(op))
	}
	return []byte(changeOpNames[op]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (op *ChangeOp) UnmarshalText(b []byte) error {
	for i := ChangeAdded; i <= ChangeMetadataOnly; i++ {
		if string(b) == changeOpNames[i] {
			*op = i
			return nil
		}
	}
	return fmt.Errorf("%w: unknown change op %q", ErrInvalid, b)
}

// Change is one path that changed since the first parent.
type Change struct {
	Path string   // slash-separated, relative to the workspace root; any bytes
	Op   ChangeOp // what happened
	Size uint64   // the file's size after the change (before it, for ChangeRemoved)
}

type changeJSON struct {
	Path      string   `json:"path,omitempty"`
	PathBytes []byte   `json:"path_bytes,omitempty"`
	Op        ChangeOp `json:"op"`
	Size      uint64   `json:"size"`
}

// MarshalJSON implements json.Marshaler: {"path": ..., "op": ..., "size": ...},
// with "path_bytes" (base64) instead of "path" when Path is not valid UTF-8.
func (c Change) MarshalJSON() ([]byte, error) {
	w := changeJSON{Op: c.Op, Size: c.Size}
	w.Path, w.PathBytes = pathToJSON(c.Path)
	return json.Marshal(&w)
}

// UnmarshalJSON implements json.Unmarshaler.
func (c *Change) UnmarshalJSON(b []byte) error {
	var w changeJSON
	if err := unmarshalStrict(b, &w); err != nil {
		return err
	}
	path, err := pathFromJSON(w.Path, w.PathBytes)
	if err != nil {
		return err
	}
	*c = Change{Path: path, Op: w.Op, Size: w.Size}
	return nil
}

// Exclusion is a path a policy left out of a snapshot, and why.
type Exclusion struct {
	Path   string // slash-separated, relative to the workspace root; any bytes
	Reason string // for people: which policy, e.g. "secret: matches .env"
}

// Egress is a turn's egress log: every destination its sandbox tried, with
// the policy's verdict and a count, and the DNS names it asked for.
type Egress struct {
	// Mode is the policy's mode: none, policy or unrestricted.
	Mode string `json:"mode"`
	// Destinations are per (address, port, protocol, verdict).
	Destinations []EgressDestination `json:"destinations,omitempty"`
	// DNS is the names asked for, per (name, type, outcome).
	DNS []EgressQuery `json:"dns,omitempty"`
	// Incomplete says that some attempts were not counted (a map or the
	// event buffer was full): the log is short, not wrong.
	Incomplete bool `json:"incomplete,omitempty"`
	// HTTPIntercept says the HTTP proxy terminated the sandbox's TLS to
	// the hosts with method rules, with a CA made for the turn that the
	// sandbox trusted (cairn run --http-intercept). Absent (false) in
	// records written before it existed.
	HTTPIntercept bool `json:"http_intercept,omitempty"`
}

// EgressDestination is one destination of an egress log.
type EgressDestination struct {
	Addr     string   `json:"addr"`
	Port     uint16   `json:"port"`
	Protocol string   `json:"protocol"` // tcp, udp, icmp...
	Verdict  string   `json:"verdict"`  // allowed, denied, redirected (DNS)
	Count    uint64   `json:"count"`
	Names    []string `json:"names,omitempty"` // the DNS names it was answered for
}

// EgressQuery is one DNS name of an egress log.
type EgressQuery struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Outcome string `json:"outcome"` // answered, refused...
	Count   uint64 `json:"count"`
}

type exclusionJSON struct {
	Path      string `json:"path,omitempty"`
	PathBytes []byte `json:"path_bytes,omitempty"`
	Reason    string `json:"reason"`
}

// MarshalJSON implements json.Marshaler: {"path": ..., "reason": ...}, with
// "path_bytes" (base64) instead of "path" when Path is not valid UTF-8.
func (x Exclusion) MarshalJSON() ([]byte, error) {
	w := exclusionJSON{Reason: x.Reason}
	w.Path, w.PathBytes = pathToJSON(x.Path)
	return json.Marshal(&w)
}

// UnmarshalJSON implements json.Unmarshaler.
func (x *Exclusion) UnmarshalJSON(b []byte) error {
	var w exclusionJSON
	if err := unmarshalStrict(b, &w); err != nil {
		return err
	}
	path, err := pathFromJSON(w.Path, w.PathBytes)
	if err != nil {
		return err
	}
	*x = Exclusion{Path: path, Reason: w.Reason}
	return nil
}

func pathToJSON(p string) (string, []byte) {
	if utf8.ValidString(p) {
		return p, nil
	}
	return "", []byte(p)
}

func pathFromJSON(s string, b []byte) (string, error) {
	if len(b) == 0 {
		return s, nil
	}
	if s != "" {
		return "", errors.New("both path and path_bytes")
	}
	if utf8.Valid(b) {
		return "", errors.New("path_bytes holds valid UTF-8 (belongs in path)")
	}
	return string(b), nil
}

// unmarshalStrict decodes one JSON value, refusing unknown fields (which the
// outer decoder's DisallowUnknownFields does not reach inside a custom
// UnmarshalJSON).
func unmarshalStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// ValidWorkspaceName reports whether name can name a workspace: 1..128 bytes
// of ASCII letters, digits, '.', '_' and '-', not starting with '.' or '-'.
// The error wraps ErrInvalid.
func ValidWorkspaceName(name string) error {
	const rule = "a workspace name is 1 to 128 letters, digits, '.', '_' or '-', and does not start with '.' or '-'"
	switch {
	case name == "":
		return fmt.Errorf("%w: empty workspace name: %s", ErrInvalid, rule)
	case len(name) > workspaceNameMax:
		return fmt.Errorf("%w: workspace name %q... is %d bytes long: %s", ErrInvalid, name[:32], len(name), rule)
	case name[0] == '.' || name[0] == '-':
		return fmt.Errorf("%w: workspace name %q starts with %q: %s", ErrInvalid, name, name[0], rule)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			what := fmt.Sprintf("byte %#x", c)
			if r, _ := utf8.DecodeRuneInString(name[i:]); r != utf8.RuneError {
				what = fmt.Sprintf("%q", r)
			}
			return fmt.Errorf("%w: workspace name %q contains %s at byte %d: %s", ErrInvalid, name, what, i, rule)
		}
	}
	return nil
}

var (
	snapshotEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(true))
		if err != nil {
			panic(err) // only for invalid options
		}
		return e
	})
	snapshotDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(snapshotMaxJSON))
		if err != nil {
			panic(err) // only for invalid options
		}
		return d
	})
)

// EncodeSnapshot validates s and returns its record (ErrInvalid if s is not
// valid). s is not modified; times are written in UTC.
func EncodeSnapshot(s *Snapshot) ([]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: encode snapshot: nil snapshot", ErrInvalid)
	}
	w := *s
	w.Time = s.Time.UTC()
	if s.Expires != nil {
		e := s.Expires.UTC()
		w.Expires = &e
	}
	if err := w.check(); err != nil {
		return nil, fmt.Errorf("%w: encode snapshot: %v", ErrInvalid, err)
	}
	js, err := json.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("%w: encode snapshot: %v", ErrInvalid, err)
	}
	if len(js) > snapshotMaxJSON {
		return nil, fmt.Errorf("%w: encode snapshot: record of %d bytes (max %d); list fewer changes", ErrInvalid, len(js), snapshotMaxJSON)
	}
	out := make([]byte, 0, len(snapshotMagic)+1+len(js)/2+64)
	out = append(out, snapshotMagic...)
	out = append(out, SnapshotVersion)
	return snapshotEncoder().EncodeAll(js, out), nil
}

// DecodeSnapshot decodes and validates a snapshot record: ErrCorrupt for
// anything that is not a valid record, ErrVersion for a format version this
// build does not know. The result's times are in UTC; its empty maps and
// slices are nil.
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	js, err := recordJSON(data)
	if err != nil {
		return nil, err
	}
	return decodeSnapshotJSON(js, true)
}

// snapshotJSON checks a record's header and returns its decompressed JSON.
func recordJSON(data []byte) ([]byte, error) {
	if len(data) < len(snapshotMagic)+1 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: not a snapshot record (bad magic)", ErrCorrupt)
	}
	switch v := data[len(snapshotMagic)]; {
	case v == 0:
		return nil, fmt.Errorf("%w: snapshot record: format version 0", ErrCorrupt)
	case v != SnapshotVersion:
		return nil, fmt.Errorf("%w: snapshot record has format version %d, this cairn reads version %d: written by a newer cairn; upgrade cairn",
			ErrVersion, v, SnapshotVersion)
	}
	payload := data[len(snapshotMagic)+1:]
	// DecodeAll allocates the size a frame header claims before decoding.
	// Refuse claims the frame cannot back (a block of at least 4 bytes
	// yields at most 128 KiB), so a few corrupt bytes cannot make us
	// allocate up to the 1 GiB limit.
	var h zstd.Header
	if h.Decode(payload) == nil && h.HasFCS && h.FrameContentSize > uint64(len(payload)/4+1)<<17 {
		return nil, fmt.Errorf("%w: snapshot record: zstd frame claims %d bytes, more than %d compressed bytes can hold",
			ErrCorrupt, h.FrameContentSize, len(payload))
	}
	js, err := snapshotDecoder().DecodeAll(payload, nil)
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return nil, fmt.Errorf("%w: snapshot record: larger than %d bytes decompressed", ErrCorrupt, snapshotMaxJSON)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot record: decompress: %v", ErrCorrupt, err)
	}
	if len(js) == 0 {
		return nil, fmt.Errorf("%w: snapshot record: empty payload", ErrCorrupt)
	}
	return js, nil
}

// decodeSnapshotJSON decodes and checks a record's JSON. Without changes,
// the change list is skipped (Changes stays nil): History's walks need
// only the rest, and a list can hold MaxInlineChanges entries.
func decodeSnapshotJSON(js []byte, changes bool) (*Snapshot, error) {
	s := &Snapshot{}
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	// Changes decode as plain structs: Change.UnmarshalJSON would start a
	// decoder per change, the larger part of a record's decoding time.
	type plain Snapshot
	w := struct {
		*plain
		Changes []changeJSON `json:"changes,omitempty"`
	}{plain: (*plain)(s)}
	var target any = &w
	if !changes {
		target = &struct {
			*plain
			Changes json.RawMessage `json:"changes,omitempty"`
		}{plain: (*plain)(s)}
	}
	if err := d.Decode(target); err != nil {
		return nil, fmt.Errorf("%w: snapshot record: JSON: %v", ErrCorrupt, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: snapshot record: data after the JSON object", ErrCorrupt)
	}
	if len(w.Changes) > 0 {
		s.Changes = make([]Change, len(w.Changes))
		for i, c := range w.Changes {
			path, err := pathFromJSON(c.Path, c.PathBytes)
			if err != nil {
				return nil, fmt.Errorf("%w: snapshot record: change %d: %v", ErrCorrupt, i, err)
			}
			s.Changes[i] = Change{Path: path, Op: c.Op, Size: c.Size}
		}
	}
	s.Version = SnapshotVersion
	s.Time = s.Time.UTC()
	if s.Expires != nil {
		e := s.Expires.UTC()
		s.Expires = &e
	}
	if len(s.Parents) == 0 {
		s.Parents = nil
	}
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	if len(s.Provenance) == 0 {
		s.Provenance = nil
	}
	if len(s.Changes) == 0 {
		s.Changes = nil
	}
	if len(s.Excluded) == 0 {
		s.Excluded = nil
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%w: snapshot record: %v", ErrCorrupt, err)
	}
	return s, nil
}

// check validates s; times must already be in UTC. Encode and decode share
// it, so a decoded record always re-encodes.
func (s *Snapshot) check() error {
	if !s.ChangesBlob.IsZero() && (len(s.Changes) > 0 || s.ChangesCount == 0) {
		return fmt.Errorf("%w: snapshot has a change-list blob and inline changes, or a blob of zero changes", ErrInvalid)
	}
	if s.ChangesBlob.IsZero() && s.ChangesCount != 0 {
		return fmt.Errorf("%w: snapshot counts %d changes in a blob it does not name", ErrInvalid, s.ChangesCount)
	}
	if s.Root.IsZero() {
		return errors.New("zero root tree ID")
	}
	for i, p := range s.Parents {
		if p.IsZero() {
			return fmt.Errorf("parent %d is the zero ID", i)
		}
		for _, q := range s.Parents[:i] {
			if p == q {
				return fmt.Errorf("parent %s listed twice", p.Short())
			}
		}
	}
	if err := ValidWorkspaceName(s.Workspace); err != nil {
		return err
	}
	if s.Seq == 0 {
		return errors.New("sequence number 0 (the first snapshot is 1)")
	}
	if err := checkTime("time", s.Time); err != nil {
		return err
	}
	if s.Expires != nil {
		if err := checkTime("expiry", *s.Expires); err != nil {
			return err
		}
	}
	for _, f := range [...]struct{ name, v string }{{"message", s.Message}, {"host", s.Host}, {"cairn version", s.CairnVersion}} {
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("%s is not valid UTF-8", f.name)
		}
	}
	if err := checkStringMap("label", s.Labels); err != nil {
		return err
	}
	if err := checkStringMap("provenance", s.Provenance); err != nil {
		return err
	}
	for i, c := range s.Changes {
		switch {
		case c.Path == "":
			return fmt.Errorf("change %d has an empty path", i)
		case !c.Op.Valid():
			return fmt.Errorf("change %d (%q) has invalid op %d", i, c.Path, uint8(c.Op))
		}
	}
	for i, x := range s.Excluded {
		switch {
		case x.Path == "":
			return fmt.Errorf("exclusion %d has an empty path", i)
		case x.Reason == "":
			return fmt.Errorf("exclusion %d (%q) has no reason", i, x.Path)
		case !utf8.ValidString(x.Reason):
			return fmt.Errorf("exclusion %d (%q): reason is not valid UTF-8", i, x.Path)
		}
	}
	return nil
}

func checkTime(what string, t time.Time) error {
	if t.IsZero() {
		return fmt.Errorf("no %s (zero time)", what)
	}
	if y := t.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("%s %v: year outside 0..9999", what, t)
	}
	return nil
}

func checkStringMap(what string, m map[string]string) error {
	for k, v := range m {
		switch {
		case k == "":
			return fmt.Errorf("%s with an empty key", what)
		case !utf8.ValidString(k):
			return fmt.Errorf("%s key %q is not valid UTF-8", what, k)
		case !utf8.ValidString(v):
			return fmt.Errorf("%s %q: value is not valid UTF-8", what, k)
		}
	}
	return nil
}

// EncodeChanges encodes a change list for a KindChanges blob: a JSON array
// (the blob is compressed in its pack).
func EncodeChanges(changes []Change) ([]byte, error) {
	return json.Marshal(changes)
}

// DecodeChanges decodes a KindChanges blob.
func DecodeChanges(data []byte) ([]Change, error) {
	var out []Change
	if err := unmarshalStrict(data, &out); err != nil {
		return nil, fmt.Errorf("%w: change list: %v", ErrCorrupt, err)
	}
	return out, nil
}
