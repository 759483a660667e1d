// Package sandbox runs an agent's command in a sandbox made of Linux
// namespaces, a read-only root, Landlock, seccomp and cgroups, with the
// workspace at /workspace. Run is the whole API: a plain-data Spec in, a
// Result out. It imports no other cairn package.
//
// # Process model
//
// Run is called by host root in an ordinary process (for cairn, the CLI:
// never the FUSE server, which must not be the parent of processes that use
// its mount). It:
//
//  1. validates the Spec and checks that every protection is available
//     (user namespaces, Landlock, seccomp): if one is missing it fails with
//     ErrNotSupported and nothing runs;
//  2. creates the run's cgroup (cgroups.Create, "cairn-run-[<tag>-]<random>"), with
//     the limits;
//  3. seeds the persisted paths that are new (see Persisted paths) and reads
//     the secret files;
//  4. opens, as host root, detached copies of every mount tree the sandbox is
//     made of (open_tree(OPEN_TREE_CLONE), made private so nothing
//     propagates back): the base's top-level entries, the host's device
//     nodes;
//  5. re-executes the program (/proc/self/exe, argv[0]
//     "cairn-sandbox-init") as the sandbox's init in new user, mount, pid,
//     network, UTS, IPC and cgroup namespaces, started directly in the
//     run's cgroup2 directory (CLONE_INTO_CGROUP), with a socket pair as
//     its fd 3 and nothing else of the caller: an environment holding only
//     the stage marker, stdio pipes of its own (see Stdio);
//  6. while init waits on the socket: adds it to the v1 hierarchies
//     (Group.Add), calls Spec.BeforeStart, and copies the workspace tree,
//     id-mapped through init's user namespace;
//  7. sends init its configuration (JSON in a sealed memfd) and the trees
//     (SCM_RIGHTS): the go-ahead;
//  8. collects init's reports (command started, exit statuses, errors),
//     kills the cgroup when Spec.Timeout passes or ctx ends, waits for init,
//     and in every case (errors and panics included) closes the cgroup,
//     which kills whatever is left and removes its directories.
//
// Init, PID 1 of the new pid namespace, builds the root (see Mount table),
// rooting a fresh cgroup namespace at the run's cgroups, sets the hostname
// and brings up lo. For each phase (setup, then agent) it re-executes the
// program once more as the command starter (argv[0] "cairn-sandbox-exec"),
// in a new session and process group, which confines itself (see
// Confinement) and executes the command. Init reaps every process (orphans
// reparent to it), forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and
// SIGUSR2 to the command's process group, and when the agent's command
// exits, reports its status and exits with it (128+n for signal n); the
// kernel then kills whatever is left in the pid namespace. MaybeInit, called
// first thing in main, recognizes both stages by argv[0] plus an environment
// variable the parent sets and the stage clears; in any other process it
// returns after one string comparison.
//
// # Identities
//
// The user namespace maps sandbox uids and gids 0..65535 to host
// HostIDBase..HostIDBase+65535 (default 100000..165535); host root is not
// mapped, so the workload, root inside, is never host root, and files of
// the host's root appear as nobody (65534) and get only "other"
// permissions. Supplementary groups are cleared (setgroups is allowed in the
// namespace for that: host root's group 0 must not follow init in). All
// sandboxes share the range by default: they are kept apart by namespaces,
// not by uid; give each its own HostIDBase to separate them by uid too.
//
// /workspace is an id-mapped mount (mount_setattr MOUNT_ATTR_IDMAP with the
// sandbox's user namespace): a file stored with uid 0 appears as the
// sandbox's root, and what the sandbox's root creates is stored with uid 0.
// A workspace imported by host root is thus writable by the agent, and the
// stored owners are the same on every machine. If the filesystem refuses
// the mapping (EINVAL or EOPNOTSUPP: for FUSE, a server without
// FUSE_ALLOW_IDMAP), the workspace is bound as it is, and
// Result.WorkspaceIDMapped says so; that is not weaker, only less useful:
// files then keep their host owners, so host root's are the sandbox's
// nobody, and the sandbox's files are stored as uid 100000.
//
// The base is deliberately not id-mapped: that would make host root's
// private files (/etc/shadow, /root) the sandbox root's own.
//
// # Mount table
//
// The new root is a tmpfs (read-only once built) holding:
//
//	/<entry>       every top-level entry of the base (Spec.RootFS, or the
//	               host's /) but the ones below: directories and files bound
//	               recursively, read-only, nosuid, nodev (flags the host
//	               locked on its mounts are kept: attributes are only added
//	               with mount_setattr, never cleared); symlinks recreated
//	/workspace     Spec.Workspace, id-mapped (see above), nosuid, nodev
//	/workspace/.cairn  an empty read-only tmpfs over the reserved directory,
//	               when it exists
//	/<persisted>   each persisted path, bound from the workspace, writable
//	/proc          a procfs of the sandbox's pid namespace (no hidepid: every
//	               process in it has the same uid, so it would hide nothing);
//	               /proc/sys, sysrq-trigger, irq, bus and fs read-only;
//	               kcore, keys, timer_list, sched_debug, latency_stats,
//	               timer_stats masked with /dev/null; acpi, asound and scsi
//	               with an empty tmpfs (those that exist), as runc does
//	/sys           a read-only sysfs of the sandbox's network namespace
//	               (only lo), with firmware and devices/virtual/powercap
//	               masked; an empty read-only tmpfs where the kernel refuses
//	               sysfs
//	/dev           a read-only tmpfs with the host's null, zero, full,
//	               random, urandom and tty bound in, a private devpts
//	               (newinstance, ptmxmode=0666, mode=0620) with ptmx -> pts/ptmx,
//	               /dev/shm (tmpfs, 1777), and fd, stdin, stdout, stderr
//	               symlinks into /proc/self/fd. No other device: no fuse, no
//	               disks, no kvm
//	/tmp           a fresh tmpfs, mode 1777, Spec.TmpSize
//	/run           a fresh read-only tmpfs holding only Spec.RunFiles
//	               (empty without them): the host's holds its daemons'
//	               sockets, which Landlock cannot deny before ABI 9
//
// Init builds it in its own mount namespace, made private first, on a
// tmpfs over its copy of /tmp, from the detached trees Run sent; it never
// resolves a host path itself (as the sandbox's root it could not search
// directories only host root may enter). It then calls pivot_root and
// detaches the old root (umount2 MNT_DETACH): nothing of the host's mount
// tree is reachable any more. The trees are moved into init's namespace with
// move_mount; on Linux 6.18 a tree that host root detached in the initial
// namespaces can be attached in a mount namespace owned by the child user
// namespace, and an id-mapped workspace tree made by the parent before the
// move keeps its mapping.
//
// # Persisted paths
//
// Spec.Persist paths are kept in the workspace, in .cairn/persist/<path>,
// and bound over the base at their place, so that what is installed there
// survives turns, forks and resumes as the workspace does. A path nested in
// another persisted one lives inside the other's storage and needs no bind
// of its own (it is created there if the base lacks it); any other path must
// exist in the base, without a symlink on the way (the bind needs its mount
// point). On first use (no storage yet) Run seeds the storage from the base,
// as host root writing through Spec.Workspace: type, mode, owner, times,
// symlinks and hard links are kept (extended attributes, sockets, fifos and
// device nodes are not), so the stored owners are the base's, which the
// id-mapped /workspace then shows unchanged. The copy is made under a
// temporary name and renamed when complete. From the host's root, only what
// the sandbox could read there is copied (files readable by others,
// directories readable and searchable by others): persisting /root must not
// hand host root's private files to the sandbox, which owns its persisted
// copy. A base image (Spec.RootFS) is the sandbox's own and is copied whole.
//
// Every path in the workspace is resolved beneath it without following a
// symlink (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), by Run (as host
// root) and by init: the workspace is the agent's, and a symlink it planted
// in .cairn is an error, never followed.
//
// # Confinement
//
// Before any command of the workload runs, in this order: init sets the
// hostname and brings up lo; the command starter, on its single locked
// thread, clears the ambient capabilities, empties the bounding set, sets
// the securebits NOROOT, NO_SETUID_FIXUP and NO_CAP_AMBIENT_RAISE (locked),
// empties its effective, permitted and inheritable sets, sets no_new_privs,
// calls landlock.Restrict (read everywhere; write beneath /workspace, /tmp,
// /dev and the persisted paths), and seccomp.Install, and executes the
// command, which inherits all of it: root inside, with no capability at all,
// not even after executing a set-uid or file-capability program. If any step
// fails, the command does not run (ErrNotSupported when the kernel lacks the
// feature). The command's environment is Spec.Env only: the program is
// looked up in Env's PATH, or DefaultPath when it has none, and PATH is not
// added. Its descriptors are stdio only.
//
// Init itself is not confined by Landlock or seccomp: it unmounts the secret
// files after the setup phase, which both would forbid. It runs only its own
// code, waits in wait4 while the workload runs, is not dumpable (the
// workload can neither trace it nor open its /proc files), and as PID 1 of
// the namespace it receives only the signals it handles; from Landlock ABI 6
// the workload cannot signal it at all.
//
// # Setup phase and secrets
//
// Spec.Setup runs first, as the agent's command does, with Spec.Env plus its
// SecretEnv, and with each SecretFile's content (read by Run, as host root)
// bound over its destination from a tmpfs that is never attached anywhere
// else (a missing destination gets an empty placeholder, and missing parent
// directories, removed afterwards). When its command exits, init kills every
// process the phase left (a daemon would keep the secrets), detaches the
// secret binds and removes the placeholders; if that fails, or the command
// failed, the agent phase does not run (ErrSetupFailed). Nothing of a secret
// is written to the workspace or any other filesystem; Result lists the
// secret destinations and variable names, never their content.
//
// # Stdio
//
// The sandbox's stdin, stdout and stderr are always pipes owned by the
// sandbox's root, which Run copies from Spec.Stdin and to Spec.Stdout and
// Spec.Stderr: the workload never holds a descriptor of the caller's
// terminal or files, and it can reopen its streams through /dev/stdout and
// /proc/self/fd. The command therefore never has a terminal.
//
// # What is protected, and what is not
//
// Protected: the host's files (read-only, and only what "others" may read;
// writable are /workspace, /tmp, /dev/shm and the persisted paths), its
// processes (a pid namespace; the workload cannot see, signal or trace
// anything outside), its network (a network namespace with only lo; or,
// with Spec.HostNetwork, the host's, where the workload holds no capability
// and an egress policy (package netpolicy) is attached to the run's cgroup
// through BeforeStart), its kernel
// interfaces (no capabilities, the seccomp allowlist, read-only /proc/sys
// and /sys), the caller's environment, descriptors and terminal, and its
// resources (memory, pids and CPU limits; everything killed at the end).
//
// Not protected: the host's world-readable files are readable (the base is
// the host's root unless Spec.RootFS says otherwise); the kernel itself
// remains the attack surface the allowlist leaves; CPU time and memory are
// only as limited as Spec.Limits says (no limit by default), and /tmp and
// /dev/shm are charged to the memory limit; disk space in the workspace is
// the workspace filesystem's business. All sandboxes share the host uid
// range unless given distinct HostIDBase values.
//
// Pids limits count threads, the sandbox's own processes included (init and
// the command starter use about 13 before the command runs), hence MinPids.
// Init's cgroup namespace is rooted at the run's cgroups, so
// /proc/self/cgroup shows "/".
//
// On other operating systems Run returns ErrNotSupported and MaybeInit does
// nothing.
package sandbox
