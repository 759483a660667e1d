package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/daemon"
	"github.com/cairnfs/cairn/journal"
	"github.com/cairnfs/cairn/sandbox"
)

func absolute(p string) (string, error) { return filepath.Abs(p) }

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newApp() *cli.App {
	app := &cli.App{
		Name:    "cairn",
		Usage:   "a content-addressed, snapshotting filesystem for AI-agent workspaces",
		Version: version,
		// A repeatable flag's value is taken whole: rules and variables
		// hold commas (--allow 1.2.3.4:80,443, --env LIST=a,b).
		DisableSliceFlagSeparator: true,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:    "home",
				Usage:   "state directory: journals, cache, sockets and the default local store (default: /var/lib/cairn as root, else $XDG_DATA_HOME/cairn)",
				EnvVars: []string{"CAIRN_HOME"},
			},
			&cli.StringFlag{
				Name:    "cache-size",
				Usage:   "the local cache of a remote store's data: at most `SIZE` bytes (K, M, G, T suffixes; 0: off), least recently used dropped first (default 10G)",
				EnvVars: []string{"CAIRN_CACHE_SIZE"},
			},
			&cli.StringFlag{
				Name:    "store",
				Usage:   "the store: a directory, file:///PATH or s3://BUCKET/PREFIX?endpoint=URL&region=R (default: HOME/store)",
				EnvVars: []string{"CAIRN_STORE"},
			},
		},
		Commands: []*cli.Command{newInitCommand(), newMountCommand(), newUnmountCommand(), newSnapshotCommand(), newStatusCommand(),
			newLogCommand(), newShowCommand(), newDiffCommand(), newWorkspacesCommand(), newForkCommand(), newRollbackCommand(), newLsCommand(), newCatCommand(), newRestoreCommand(), newExportCommand(), newImportCommand(), newWarmupCommand(), newRepairCommand(), newRunCommand()},
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {}, // exit codes are decided in exitCode
		OnUsageError:    onUsageError,
	}
	for _, c := range app.Commands {
		c.OnUsageError = onUsageError
	}
	return app
}

// onUsageError marks flag-parsing errors as usage errors (exit code 2).
func onUsageError(_ *cli.Context, err error, _ bool) error {
	return usageError{fmt.Errorf("%w (see --help)", err)}
}

// globals are the options every verb shares.
type globals struct {
	Home  string // state directory
	Store string // store URL
	// CacheSize bounds the local cache of a remote store's data
	// (chunkstore.Options.CacheSize: 0 the default, < 0 off).
	CacheSize int64
}

// storeOptions are the chunkstore options every verb opens a store with.
// Warnings (an index file skipped as corrupt) go to stderr.
func (g globals) storeOptions() chunkstore.Options {
	return chunkstore.Options{CacheDir: filepath.Join(g.Home, "cache"), CacheSize: g.CacheSize, Logf: warnf}
}

// warnf prints a warning for a person on stderr.
func warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cairn: warning: "+format+"\n", args...)
}

// parseSize parses 10G, 512M, 1.5TiB, 4096 (bytes; binary units).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mult := 1.0
	if n := len(t); n > 0 {
		if i := strings.IndexByte("KMGT", t[n-1]); i >= 0 {
			mult, t = float64(int64(1)<<(10*(i+1))), t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*mult > 1<<62 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional K, M, G or T", s)
	}
	return int64(v * mult), nil
}

func globalsFrom(c *cli.Context) (globals, error) {
	g := globals{Home: c.String("home"), Store: c.String("store")}
	if g.Home == "" {
		g.Home = defaultHome()
	}
	abs, err := filepath.Abs(g.Home)
	if err != nil {
		return g, usageError{fmt.Errorf("--home %q: %w", g.Home, err)}
	}
	g.Home = abs
	if v := c.String("cache-size"); v != "" {
		n, err := parseSize(v)
		if err != nil {
			return g, usageError{fmt.Errorf("--cache-size: %w", err)}
		}
		g.CacheSize = n
		if n == 0 {
			g.CacheSize = -1 // off
		}
	}
	if g.Store == "" {
		g.Store = filepath.Join(g.Home, "store")
	}
	return g, nil
}

func defaultHome() string {
	if os.Geteuid() == 0 {
		return "/var/lib/cairn"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "cairn")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "cairn")
	}
	return ".cairn"
}

// usageError marks errors in how cairn was called (exit code 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// Exit codes, documented in the README.
const (
	exitOK       = 0
	exitError    = 1 // the operation failed
	exitUsage    = 2 // bad flags or arguments
	exitNotFound = 3 // a store, workspace or snapshot does not exist
	exitConflict = 4 // already exists, or lost a compare-and-swap
	exitCorrupt  = 5 // stored data failed verification
	// cairn run's own failures, next to the command's statuses (as
	// timeout(1) and env(1) do): 124 the command timed out, 125 the sandbox
	// could not run it (a protection unavailable here, its init failed, the
	// setup phase failed), 126/127 the command could not be started / was
	// not found.
	exitTimedOut    = 124
	exitSandbox     = 125
	exitCannotStart = 127
)

// exitCode prints err for a person and maps it to the process exit code.
func exitCode(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var st exitStatus
	if errors.As(err, &st) && errors.Unwrap(err) == nil {
		return int(st) // cairn run: the command's own status, said by it
	}
	fmt.Fprintf(w, "cairn: %v\n", err)
	var u usageError
	switch {
	case errors.As(err, &u), errors.Is(err, chunkstore.ErrInvalid), errors.Is(err, sandbox.ErrInvalid):
		return exitUsage
	case errors.Is(err, sandbox.ErrExec):
		return exitCannotStart
	case errors.Is(err, sandbox.ErrNotSupported), errors.Is(err, sandbox.ErrInit), errors.Is(err, sandbox.ErrSetupFailed),
		errors.As(err, new(sandboxFailure)):
		return exitSandbox
	case errors.Is(err, daemon.ErrNotMounted):
		return exitNotFound
	case errors.Is(err, daemon.ErrBusy), errors.Is(err, journal.ErrBusy):
		return exitConflict
	case errors.Is(err, journal.ErrInvalid):
		return exitUsage
	case errors.Is(err, journal.ErrNotFound):
		return exitNotFound
	case errors.Is(err, chunkstore.ErrCorrupt):
		return exitCorrupt
	case errors.Is(err, chunkstore.ErrNotFound):
		return exitNotFound
	case errors.Is(err, chunkstore.ErrConflict):
		return exitConflict
	}
	return exitError
}

// interspersed lets flags follow a verb's arguments (`cairn snapshot ws -m
// msg`), which urfave/cli v2 does not: it moves each verb's flags (with
// their values) in front of its arguments. "--" ends flags as usual.
func interspersed(app *cli.App, args []string) []string {
	out := append([]string(nil), args[:1]...)
	i := 1
	// Global flags, up to the verb.
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		out = append(out, args[i])
		if takesValue(app.Flags, args[i]) && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
		i++
	}
	if i >= len(args) {
		return out
	}
	cmd := app.Command(args[i])
	out = append(out, args[i])
	i++
	if cmd == nil {
		return append(out, args[i:]...)
	}
	var flags, pos []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			flags = append(flags, a)
			if takesValue(cmd.Flags, a) && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(append(out, flags...), pos...)
}

// takesValue reports whether arg names a flag that takes a separate value.
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if bf, ok := f.(*cli.BoolFlag); ok && bf != nil {
				return false
			}
			return true
		}
	}
	return false
}
