package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/sandbox/landlock"
	"github.com/cairnfs/cairn/sandbox/seccomp"
)

// The command starter: init starts it (the program again, argv[0]
// execArg0) for each phase, in the sandbox's root, as the sandbox's root
// with all its capabilities in the sandbox's user namespace. On its one
// thread it confines itself, in this order, and executes the command, which
// inherits everything:
//
//  1. capabilities: ambient cleared, bounding set emptied, securebits
//     NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE (all locked), then
//     effective, permitted and inheritable emptied;
//  2. no_new_privs;
//  3. Landlock: read everywhere, write beneath the phase's write paths;
//  4. the seccomp filter.
//
// Init does not confine itself: it must unmount the secret files after the
// setup phase, which Landlock (no mount changes in a domain) and seccomp (no
// mount calls) would forbid. It runs only its own code, is not dumpable,
// and the workload cannot signal it (PID 1 ignores signals it does not
// handle) nor trace it.

// Securebits (linux/securebits.h).
const (
	secbitNoroot                 = 1 << 0
	secbitNorootLocked           = 1 << 1
	secbitNoSetuidFixup          = 1 << 2
	secbitNoSetuidFixupLocked    = 1 << 3
	secbitKeepCapsLocked         = 1 << 5
	secbitNoCapAmbientRaise      = 1 << 6
	secbitNoCapAmbientRaiseLockd = 1 << 7

	securebits = secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLockd
)

// execMain is the command starter's main. It returns only on failure, after
// writing why to its status pipe.
func execMain() int {
	status := os.NewFile(execStatusFD, "status")
	fail := func(kind string, err error) int {
		json.NewEncoder(status).Encode(execFailure{Kind: kind, Msg: err.Error()})
		return 127
	}
	var cfg execConfig
	if err := readJSONFD(execConfigFD, &cfg); err != nil {
		return fail(kindInit, fmt.Errorf("read the command's config: %w", err))
	}
	// Only stdio survives the exec; the status pipe closes with it.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail(kindInit, fmt.Errorf("close_range: %w", err))
	}
	if err := unix.Chdir(cfg.Dir); err != nil {
		return fail(kindExec, fmt.Errorf("working directory %s: %w", cfg.Dir, err))
	}
	prog, err := lookPath(cfg.Args[0], cfg.Env)
	if err != nil {
		return fail(kindExec, err)
	}
	if err := confine(cfg.WritePaths); err != nil {
		kind := kindInit
		if errors.Is(err, ErrNotSupported) {
			kind = kindNotSupported
		}
		return fail(kind, err)
	}
	err = syscall.Exec(prog, cfg.Args, cfg.Env)
	return fail(kindExec, fmt.Errorf("exec %s: %w", prog, err))
}

// confine applies the confinement to the calling thread (locked by
// MaybeInit), which the command will inherit.
func confine(writePaths []string) error {
	if err := dropCapabilities(); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	rules := []landlock.Rule{{Path: "/"}}
	for _, p := range writePaths {
		rules = append(rules, landlock.Rule{Path: p, Write: true})
	}
	if err := landlock.Restrict(rules); err != nil {
		if errors.Is(err, landlock.ErrNotSupported) {
			return fmt.Errorf("%w: %w", ErrNotSupported, err)
		}
		return err
	}
	if err := seccomp.Install(); err != nil {
		if errors.Is(err, seccomp.ErrNotSupported) {
			return fmt.Errorf("%w: %w", ErrNotSupported, err)
		}
		return err
	}
	return nil
}

// dropCapabilities leaves the thread, and whatever it executes, without any
// capability, and unable to regain one by executing anything as root.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient: %w", err)
	}
	for c := 0; ; c++ {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil {
			break // EINVAL: past the last capability
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, securebits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return errors.New("capabilities remain after capset")
		}
	}
	return nil
}

// lookPath finds the program the way a shell would: a name with a slash is
// taken as is; otherwise each directory of env's PATH, or of DefaultPath
// when env has none, is tried. The search path is not added to env.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", fmt.Errorf("command %s: %w", name, err)
		}
		return name, nil
	}
	search := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			search = v
		}
	}
	for _, dir := range strings.Split(search, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found in PATH %q", name, search)
}

func executable(p string) error {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return unix.EISDIR
	}
	return unix.Access(p, unix.X_OK)
}
