//go:build linux

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// secret is a -secret NAME=VALUE to look for.
type secret struct{ name, value string }

// options are the probe's flags.
type options struct {
	json        bool
	hostPid     int      // -host-pid: a pid in the host's pid namespace (0: unset)
	hostPort    int      // -host-port: a TCP port the host listens on at 127.0.0.1 (0: unset)
	secrets     []secret // -secret NAME=VALUE (repeatable)
	secretFiles []string // -secret-file PATH (repeatable): must not exist
	abstract    string   // -abstract NAME: a host abstract unix socket
	unixPath    string   // -unix PATH: a host pathname unix socket
	allowWrite  []string // -allow-write PATHS: directories that must be writable
	denyWrite   []string // -deny-write PATHS: files or directories that must not be
	setuid      string   // -setuid PATH: a setuid-root copy of this probe
	marker      string   // -marker PATH: a file only the host can see
	scratch     string   // -scratch DIR: where to make temporary files (default $TMPDIR or /tmp)
	umount      string   // -umount PATH: the mount to try to unmount (default /workspace)

	work string // the probe's own temporary directory under scratch, made on first use
}

// listFlag collects repeatable, comma-separated values.
type listFlag struct{ dst *[]string }

func (l listFlag) String() string { return "" }
func (l listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.dst = append(*l.dst, p)
		}
	}
	return nil
}

// secretFlag collects -secret NAME=VALUE.
type secretFlag struct{ dst *[]secret }

func (s secretFlag) String() string { return "" }
func (s secretFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return errors.New("want NAME=VALUE")
	}
	if len(value) < 6 {
		return errors.New("the value must have at least 6 characters to be searched for")
	}
	*s.dst = append(*s.dst, secret{name, value})
	return nil
}

func newFlagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("escapeprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.json, "json", false, "print one JSON document instead of lines")
	fs.IntVar(&o.hostPid, "host-pid", 0, "a pid of the host's pid namespace that must be invisible")
	fs.IntVar(&o.hostPort, "host-port", 0, "a TCP port listening on the host's 127.0.0.1 that must be unreachable")
	fs.Var(secretFlag{&o.secrets}, "secret", "NAME=VALUE of a secret that must not be readable (repeatable)")
	fs.Var(listFlag{&o.secretFiles}, "secret-file", "paths of secret files that must not exist (repeatable, comma-separated)")
	fs.StringVar(&o.abstract, "abstract", "", "name of a host abstract unix socket that must be unreachable")
	fs.StringVar(&o.unixPath, "unix", "", "path of a host unix socket that must be unreachable")
	fs.Var(listFlag{&o.allowWrite}, "allow-write", "directories that must be writable (repeatable, comma-separated)")
	fs.Var(listFlag{&o.denyWrite}, "deny-write", "files or directories that must not be writable (repeatable, comma-separated)")
	fs.StringVar(&o.setuid, "setuid", "", "a setuid-root copy of this probe")
	fs.StringVar(&o.marker, "marker", "", "a file only the host can see (looked for after the chroot escape)")
	fs.StringVar(&o.scratch, "scratch", os.TempDir(), "a writable directory for temporary files")
	fs.StringVar(&o.umount, "umount", "/workspace", "the mount point to try to unmount")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: escapeprobe [flags] CHECK... | all\nchecks: %s\n", strings.Join(checkNames(), " "))
		fs.PrintDefaults()
	}
	return fs
}

// run is the probe's entry point; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if code, ok := runHelper(args[0], args[1:], stdout, stderr); ok {
			return code
		}
	}
	var o options
	fs := newFlagSet(&o, stderr)
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return exitError
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(names) == 0 {
		fs.Usage()
		return exitError
	}
	var todo []check
	explicit := true
	for _, n := range names {
		if n == "all" {
			todo = append(todo[:0], checks...)
			explicit = false
			break
		}
		c, ok := lookupCheck(n)
		if !ok {
			fmt.Fprintf(stderr, "escapeprobe: unknown check %q (known: all %s)\n", n, strings.Join(checkNames(), " "))
			return exitError
		}
		todo = append(todo, c)
	}
	defer o.cleanup()
	results := make([]result, 0, len(todo))
	for _, c := range todo {
		results = append(results, runCheck(&o, c, explicit))
	}
	var err error
	if o.json {
		err = writeJSON(stdout, results)
	} else {
		err = writeText(stdout, results)
	}
	if err != nil {
		fmt.Fprintf(stderr, "escapeprobe: %v\n", err)
		return exitError
	}
	return exitCode(results)
}

// runCheck runs one check, or reports why it cannot: a parameter it needs
// is missing (SKIPPED under "all", ERROR when asked for by name).
func runCheck(o *options, c check, explicit bool) result {
	if c.needs != "" && !c.has(o) {
		st := Skipped
		if explicit {
			st = Errored
		}
		return result{Check: c.name, Status: st, Detail: "needs -" + c.needs}
	}
	return summarize(c.name, c.run(o))
}

// workDir returns the probe's temporary directory, making it on first use.
func (o *options) workDir() (string, error) {
	if o.work != "" {
		return o.work, nil
	}
	d, err := os.MkdirTemp(o.scratch, "escapeprobe-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("make scratch directory: %w", err)
	}
	o.work = d
	return d, nil
}

func (o *options) cleanup() {
	if o.work != "" {
		os.RemoveAll(o.work)
	}
}
