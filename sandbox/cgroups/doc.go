// Package cgroups gives each sandbox its own cgroup: resource limits
// (memory, pids, CPU), accounting, and a way to kill the sandbox's whole
// process tree, on machines with cgroup v1 controllers, with cgroup v2 only,
// or with a mix of both.
//
// # Layout
//
// Create reads /proc/self/cgroup and /proc/self/mountinfo to find the mounted
// hierarchies and this process's own cgroup in each, and creates the group
// beneath it, in ParentDir/<name> ("cairn/<name>"), so a sandbox stays inside
// whatever limits enclose cairn itself (a container's, a systemd unit's):
//
//   - In the cgroup2 hierarchy, when one is mounted, always: Path and FD
//     give that directory, for BPF programs and for CLONE_INTO_CGROUP, and
//     Kill uses its cgroup.kill.
//   - For each nonzero limit, where its controller lives. A controller is
//     bound to one hierarchy at a time: if a v1 hierarchy has it (memory,
//     pids, cpu), the group gets a directory there; otherwise, if the cgroup2
//     hierarchy offers it, it is enabled for the group's cgroup2 directory.
//     A limit whose controller is nowhere is an error wrapping
//     ErrNotSupported.
//
// On the development machine (a mixed layout) cgroup2 is mounted at
// /sys/fs/cgroup/unified with no controllers in use, and memory, pids and cpu
// are v1 hierarchies under /sys/fs/cgroup: a group with every limit has four
// directories.
//
// # cgroup v2 delegation
//
// cgroup v2 enables a controller for a cgroup only through its parent's
// cgroup.subtree_control, and (the "no internal processes" rule) a non-root
// cgroup that has processes cannot enable controllers for its children. When
// a limit needs a v2 controller, Create enables it in this process's cgroup
// and in the shared parent: that works when this process's cgroup is the
// root, or already has the controller in its subtree_control (a delegated
// systemd unit, a container whose manager did it), or has no processes.
// When this process sits in a non-root cgroup with processes and without the
// controller enabled, Create fails with an error that says so (wrapping
// ErrNotSupported): run cairn in a cgroup that delegates the controllers, for
// example a systemd service with Delegate=yes whose processes live in a
// leaf below it. Create never moves processes around itself.
//
// # Starting a process in the group
//
// Either start it inside the cgroup2 directory with clone3's
// CLONE_INTO_CGROUP (syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
// with fd from FD) and then, before it runs the workload, call Add for the v1
// hierarchies; or start it anywhere and call Add before it proceeds. Either
// way the child must wait (on a pipe, say) until the parent's Add returned:
// v1 membership cannot be set at clone time. Children inherit the group.
//
// # Ending
//
// Kill writes cgroup.kill (Linux 5.14+), then SIGKILLs whatever is still
// listed in any hierarchy, and waits (at most 10 s) until every cgroup.procs
// is empty. Close kills, records the final Stats, and removes every
// directory, and the shared parent directories if they are left empty.
//
// Names must be unique among live groups. A directory left by a crashed run
// under the same name is removed and made afresh by Create if it holds no
// process; if it holds one, Create fails with an error wrapping ErrExist.
// Sweep removes stale empty groups older than a given age.
//
// Everything here needs the right to create cgroups (root, or a delegated
// subtree). On other operating systems Create returns ErrNotSupported.
package cgroups
