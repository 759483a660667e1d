package sandbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/sandbox"
)

func TestSpec_ValidateRunFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []sandbox.RunFile
		ok    bool
	}{
		{"None", nil, true},
		{"Two", []sandbox.RunFile{{Path: "/run/cairn/ca.pem", Data: []byte("x")}, {Path: "/run/cairn/ca-bundle.pem", Mode: 0o644}}, true},
		{"Relative", []sandbox.RunFile{{Path: "run/x"}}, false},
		{"Unclean", []sandbox.RunFile{{Path: "/run/a/../x"}}, false},
		{"RunItself", []sandbox.RunFile{{Path: "/run"}}, false},
		{"OutsideRun", []sandbox.RunFile{{Path: "/etc/ssl/cert.pem"}}, false},
		{"PrefixNotDir", []sandbox.RunFile{{Path: "/runner/x"}}, false},
		{"Twice", []sandbox.RunFile{{Path: "/run/x"}, {Path: "/run/x"}}, false},
		{"Nested", []sandbox.RunFile{{Path: "/run/x"}, {Path: "/run/x/y"}}, false},
		{"Setuid", []sandbox.RunFile{{Path: "/run/x", Mode: 0o4755}}, false},
		{"TooLarge", []sandbox.RunFile{{Path: "/run/x", Data: make([]byte, sandbox.MaxRunFilesSize/2+1)},
			{Path: "/run/y", Data: make([]byte, sandbox.MaxRunFilesSize/2)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sandbox.Spec{Args: []string{"true"}, Workspace: "/ws", RunFiles: tc.files}
			err := s.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !tc.ok && (!errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "run file")) {
				t.Fatalf("Validate = %v, want ErrInvalid about the run files", err)
			}
		})
	}
}
