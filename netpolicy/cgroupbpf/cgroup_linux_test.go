package cgroupbpf

import "testing"

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		"/sys/fs/cgroup":         "/sys/fs/cgroup",
		`/mnt/cgroup\040two`:     "/mnt/cgroup two",
		`/a\134b\011c\012`:       "/a\\b\tc\n",
		`/odd\04`:                `/odd\04`,
		`/not\08x`:               `/not\08x`,
		`/trailing\`:             `/trailing\`,
		`\040lead`:               " lead",
		`/two\040\040spaces\040`: "/two  spaces ",
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}
