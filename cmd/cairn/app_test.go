package main

import (
	"reflect"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "10G": 10 << 30, "512m": 512 << 20, "1.5TiB": 3 << 39, "2KB": 2048, "0": 0} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "-1", "10X", "1e30"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

// TestApp_SliceFlagsWhole: a repeatable flag's value is taken whole, commas
// and all (rules like --allow 1.2.3.4:80,443 and --env LIST=a,b need it).
func TestApp_SliceFlagsWhole(t *testing.T) {
	app := newApp()
	var got map[string][]string
	for _, c := range app.Commands {
		if c.Name != "run" {
			continue
		}
		c.Action = func(c *cli.Context) error {
			got = map[string][]string{"env": c.StringSlice("env"), "allow": c.StringSlice("allow"), "http-methods": c.StringSlice("http-methods")}
			return nil
		}
	}
	err := app.Run([]string{"cairn", "run", "--env", "LIST=a,b", "--env", "X=1", "--allow", "127.0.0.1:80,443",
		"--http-methods", "h.test=GET,HEAD", "ws", "--", "true"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"env": {"LIST=a,b", "X=1"}, "allow": {"127.0.0.1:80,443"}, "http-methods": {"h.test=GET,HEAD"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsed %v, want %v", got, want)
	}
}
