package sandbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/cairnfs/cairn/sandbox"
	"github.com/cairnfs/cairn/sandbox/cgroups"
)

func TestSpec_Validate(t *testing.T) {
	valid := func() *sandbox.Spec {
		return &sandbox.Spec{Args: []string{"true"}, Workspace: "/ws"}
	}
	ok := []struct {
		name string
		edit func(s *sandbox.Spec)
	}{
		{"Minimal", func(s *sandbox.Spec) {}},
		{"Everything", func(s *sandbox.Spec) {
			s.Env = []string{"A=1", "B="}
			s.Dir = "/workspace/sub"
			s.RootFS = "/srv/image"
			s.Persist = []string{"/root", "/root/.cache", "/usr/local"}
			s.Hostname = "agent-1.example"
			s.Tag = "0123456789abcdef"
			s.HostIDBase = 200000
			s.Limits = cgroups.Limits{MemoryBytes: 1 << 30, Pids: 100, CPUs: 1}
			s.Timeout = time.Minute
			s.TmpSize = 1 << 20
			s.Setup = &sandbox.Phase{
				Args:        []string{"make", "deps"},
				SecretEnv:   []string{"TOKEN=x"},
				SecretFiles: []sandbox.SecretFile{{Src: "/host/netrc", Dst: "/root/.netrc"}},
			}
		}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			s := valid()
			tc.edit(s)
			if err := s.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}

	bad := []struct {
		name string
		edit func(s *sandbox.Spec)
	}{
		{"NoArgs", func(s *sandbox.Spec) { s.Args = nil }},
		{"EmptyCommand", func(s *sandbox.Spec) { s.Args = []string{""} }},
		{"NULInArg", func(s *sandbox.Spec) { s.Args = []string{"echo", "a\x00b"} }},
		{"EnvWithoutEquals", func(s *sandbox.Spec) { s.Env = []string{"A"} }},
		{"EnvEmptyName", func(s *sandbox.Spec) { s.Env = []string{"=x"} }},
		{"EnvTwice", func(s *sandbox.Spec) { s.Env = []string{"A=1", "A=2"} }},
		{"RelativeDir", func(s *sandbox.Spec) { s.Dir = "workspace" }},
		{"UncleanDir", func(s *sandbox.Spec) { s.Dir = "/workspace/../etc" }},
		{"NoWorkspace", func(s *sandbox.Spec) { s.Workspace = "" }},
		{"RelativeWorkspace", func(s *sandbox.Spec) { s.Workspace = "ws" }},
		{"RelativeRootFS", func(s *sandbox.Spec) { s.RootFS = "image" }},
		{"PersistRoot", func(s *sandbox.Spec) { s.Persist = []string{"/"} }},
		{"PersistRelative", func(s *sandbox.Spec) { s.Persist = []string{"usr/local"} }},
		{"PersistUnclean", func(s *sandbox.Spec) { s.Persist = []string{"/usr/local/"} }},
		{"PersistDotDot", func(s *sandbox.Spec) { s.Persist = []string{"/usr/../etc"} }},
		{"PersistWorkspace", func(s *sandbox.Spec) { s.Persist = []string{"/workspace/x"} }},
		{"PersistProc", func(s *sandbox.Spec) { s.Persist = []string{"/proc"} }},
		{"PersistSys", func(s *sandbox.Spec) { s.Persist = []string{"/sys/fs"} }},
		{"PersistDev", func(s *sandbox.Spec) { s.Persist = []string{"/dev"} }},
		{"PersistTmp", func(s *sandbox.Spec) { s.Persist = []string{"/tmp/cache"} }},
		{"PersistRun", func(s *sandbox.Spec) { s.Persist = []string{"/run"} }},
		{"PersistTwice", func(s *sandbox.Spec) { s.Persist = []string{"/root", "/root"} }},
		{"BadHostname", func(s *sandbox.Spec) { s.Hostname = "a b" }},
		{"LongHostname", func(s *sandbox.Spec) { s.Hostname = string(make([]byte, 65)) }},
		{"BadTag", func(s *sandbox.Spec) { s.Tag = "a/b" }},
		{"UpperTag", func(s *sandbox.Spec) { s.Tag = "ABC" }},
		{"LongTag", func(s *sandbox.Spec) { s.Tag = "0123456789abcdef0" }},
		{"HostIDBaseTooLow", func(s *sandbox.Spec) { s.HostIDBase = 1000 }},
		{"HostIDBaseTooHigh", func(s *sandbox.Spec) { s.HostIDBase = 1<<32 - 100 }},
		{"PidsTooLow", func(s *sandbox.Spec) { s.Limits.Pids = 8 }},
		{"NegativeTimeout", func(s *sandbox.Spec) { s.Timeout = -time.Second }},
		{"NegativeTmpSize", func(s *sandbox.Spec) { s.TmpSize = -1 }},
		{"SetupNoArgs", func(s *sandbox.Spec) { s.Setup = &sandbox.Phase{} }},
		{"SecretEnvAlsoInEnv", func(s *sandbox.Spec) {
			s.Env = []string{"TOKEN=public"}
			s.Setup = &sandbox.Phase{Args: []string{"true"}, SecretEnv: []string{"TOKEN=x"}}
		}},
		{"SecretFileRelativeSrc", func(s *sandbox.Spec) {
			s.Setup = &sandbox.Phase{Args: []string{"true"}, SecretFiles: []sandbox.SecretFile{{Src: "netrc", Dst: "/root/.netrc"}}}
		}},
		{"SecretFileInProc", func(s *sandbox.Spec) {
			s.Setup = &sandbox.Phase{Args: []string{"true"}, SecretFiles: []sandbox.SecretFile{{Src: "/a", Dst: "/proc/x"}}}
		}},
		{"SecretFileTwice", func(s *sandbox.Spec) {
			s.Setup = &sandbox.Phase{Args: []string{"true"}, SecretFiles: []sandbox.SecretFile{
				{Src: "/a", Dst: "/root/x"}, {Src: "/b", Dst: "/root/x"}}}
		}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			s := valid()
			tc.edit(s)
			if err := s.Validate(); !errors.Is(err, sandbox.ErrInvalid) {
				t.Fatalf("Validate = %v, want an error matching ErrInvalid", err)
			}
		})
	}

	t.Run("Limits", func(t *testing.T) {
		s := valid()
		s.Limits.Pids = -1
		if err := s.Validate(); !errors.Is(err, cgroups.ErrInvalid) {
			t.Fatalf("Validate = %v, want an error matching cgroups.ErrInvalid", err)
		}
	})
	t.Run("Nil", func(t *testing.T) {
		var s *sandbox.Spec
		if err := s.Validate(); !errors.Is(err, sandbox.ErrInvalid) {
			t.Fatalf("Validate = %v, want ErrInvalid", err)
		}
	})
}
