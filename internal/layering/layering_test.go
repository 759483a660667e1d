package layering

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/cairnfs/cairn/"

// forbidden lists, per package prefix, the project packages it must not
// depend on (directly or not).
var forbidden = map[string][]string{
	"chunkstore": {"journal", "fs", "daemon", "cmd", "sandbox", "netpolicy", "integration"},
	"journal":    {"fs", "daemon", "cmd", "sandbox", "netpolicy", "integration"},
	"fs":         {"daemon", "cmd", "sandbox", "netpolicy", "integration"},
	"daemon":     {"cmd", "integration"},
	"sandbox":    {"chunkstore", "journal", "fs", "daemon", "cmd", "netpolicy", "integration"},
	"netpolicy":  {"chunkstore", "journal", "fs", "daemon", "cmd", "sandbox", "integration"},
}

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps", "github.com/cairnfs/cairn/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p.ImportPath, module)
		top, _, _ := strings.Cut(rel, "/")
		for _, dep := range p.Deps {
			dtop, _, _ := strings.Cut(strings.TrimPrefix(dep, module), "/")
			if !strings.HasPrefix(dep, module) {
				continue
			}
			for _, bad := range forbidden[top] {
				if dtop == bad {
					t.Errorf("%s imports %s: import arrows must point down (see DESIGN.md)", p.ImportPath, dep)
				}
			}
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("checked only %d packages", checked)
	}
}
