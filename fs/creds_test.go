package fs

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/journal"
)

// A status text as Linux 6.18 prints it (abridged after Groups).
const statusText = `Name:	cat
Umask:	0022
State:	R (running)
Tgid:	4242
Ngid:	0
Pid:	4242
PPid:	1
TracerPid:	0
Uid:	100000	100001	100002	100003
Gid:	100010	100011	100012	100013
FDSize:	64
Groups:	100020 5 100030 
NStgid:	4242
NSpid:	4242
VmPeak:	    8412 kB
`

func TestParseStatus(t *testing.T) {
	p, err := parseStatus([]byte(statusText))
	if err != nil {
		t.Fatal(err)
	}
	if want := (creds{uid: 100003, gid: 100013, groups: []uint32{100020, 5, 100030}}); !reflect.DeepEqual(p, want) {
		t.Fatalf("parsed %+v, want %+v (the fsuid and fsgid: fourth fields)", p, want)
	}
	p, err = parseStatus([]byte(strings.Replace(statusText, "Groups:	100020 5 100030 \n", "Groups:\t\n", 1)))
	if err != nil || p.groups != nil {
		t.Fatalf("no groups: %+v, %v", p, err)
	}
	for name, text := range map[string]string{
		"no Uid":    strings.Replace(statusText, "Uid:", "Xid:", 1),
		"no Gid":    strings.Replace(statusText, "Gid:", "Xid:", 1),
		"no Groups": strings.Replace(statusText, "Groups:", "Xroups:", 1),
		"short Uid": strings.Replace(statusText, "100000\t100001\t100002\t100003", "100000\t100001", 1),
		"bad Gid":   strings.Replace(statusText, "100013", "-1", 1),
		"bad group": strings.Replace(statusText, " 5 ", " x ", 1),
		"empty":     "",
		"cut":       statusText[:strings.Index(statusText, " 5 ")],
	} {
		if _, err := parseStatus([]byte(text)); !errors.Is(err, errStatus) {
			t.Errorf("%s: %v, want errStatus", name, err)
		}
	}
}

// Host ids in the sandboxes' range are translated into the workspace's;
// others stay; a sandbox's process loses the ids it cannot name.
func TestWorkspaceCaller(t *testing.T) {
	f := New(nil, Options{IDMap: true})
	for _, c := range []struct {
		name string
		in   creds
		want journal.Caller
	}{
		{"sandbox root", creds{100000, 100000, nil}, journal.Caller{}},
		{"sandbox user", creds{101000, 101000, []uint32{100027, 165535}}, journal.Caller{UID: 1000, GID: 1000, Groups: []uint32{27, 65535}}},
		{"sandbox with host ids", creds{100005, 0, []uint32{0, 100004, 165536}}, journal.Caller{UID: 5, GID: 65534, Groups: []uint32{4}}},
		{"host root", creds{0, 0, []uint32{0, 1}}, journal.Caller{Groups: []uint32{0, 1}}},
		{"host user", creds{1000, 100100, []uint32{1000, 100200}}, journal.Caller{UID: 1000, GID: 100, Groups: []uint32{1000, 200}}},
		{"past the range", creds{165536, 99999, nil}, journal.Caller{UID: 165536, GID: 99999}},
	} {
		if got := f.workspaceCaller(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	plain := New(nil, Options{})
	if got, want := plain.workspaceCaller(creds{100000, 100001, []uint32{100002}}), (journal.Caller{UID: 100000, GID: 100001, Groups: []uint32{100002}}); !reflect.DeepEqual(got, want) {
		t.Errorf("without IDMap: %+v, want %+v", got, want)
	}
	// An unknown process (pid 0: another pid namespace) is nobody.
	if got := f.caller(&fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: invalidID, Gid: invalidID}}}, true); !reflect.DeepEqual(got, nobody) {
		t.Errorf("pid 0: %+v, want nobody", got)
	}
	if err := (Options{IDMapBase: 1 << 31, IDMapSize: 1 << 31}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("id range past the largest id: %v", err)
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
}

// needKernel skips a test that needs what the kernel lacks; in CI it fails.
func needKernel(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("the kernel lacks %s, and CI must not skip this test", what)
	}
	t.Skipf("the kernel lacks %s", what)
}
