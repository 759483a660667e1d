package sandbox

// What Run and the sandbox's init say to each other over their socket pair,
// and what init tells the command starter. Plain JSON: both ends are the
// same binary.

// Markers of the re-executed stages: argv[0] and the value of stageEnv. The
// variable is set by the parent and cleared by the stage itself; both must
// match for MaybeInit to act.
const (
	initArg0 = "cairn-sandbox-init"
	execArg0 = "cairn-sandbox-exec"
	stageEnv = "_CAIRN_SANDBOX_STAGE"
)

// Descriptors of the stages: init's socket, and the starter's config and
// status pipe (all right after stdio).
const (
	initSockFD    = 3
	execConfigFD  = 3
	execStatusFD  = 4
	maxFDsPerMsg  = 200 // below the kernel's SCM_MAX_FD (253)
	maxReportSize = 64 << 10
)

// initConfig is what Run sends init, in a sealed memfd passed with the
// mount descriptors.
type initConfig struct {
	Hostname string
	// HostNetwork: the sandbox shares the host's network namespace (no lo
	// to bring up).
	HostNetwork bool
	// TmpSize is the size of /tmp and /dev/shm in bytes; 0 = tmpfs default.
	TmpSize int64
	// Base lists the entries of the base root directory to recreate at the
	// sandbox's root.
	Base []baseEntry
	// Devices lists the device nodes to bind under /dev, each with the index
	// of its descriptor.
	Devices []fdEntry
	// WorkspaceFD is the index of the descriptor of the workspace tree.
	WorkspaceFD int
	// Persist are the persisted paths to bind (not the nested ones).
	Persist []string
	// RunFiles are the read-only files to write under /run (Dst, Mode,
	// Data) before it is made read-only.
	RunFiles []secretConfig `json:",omitempty"`
	// Setup is the setup phase, nil if none.
	Setup *phaseConfig
	// Agent is the agent's phase.
	Agent phaseConfig
}

// baseEntry is one entry of the base's root directory.
type baseEntry struct {
	Name string
	// Kind is "dir", "file" (both bound from the descriptor at FD) or
	// "symlink" (recreated pointing to Target).
	Kind   string
	FD     int    `json:",omitempty"`
	Target string `json:",omitempty"`
}

// fdEntry names the descriptor at index FD.
type fdEntry struct {
	Name string
	FD   int
}

// phaseConfig is one phase's command.
type phaseConfig struct {
	Name string // "setup" or "agent", for messages
	Args []string
	Env  []string
	Dir  string
	// Secrets are the phase's secret files, put in place before it runs and
	// removed after.
	Secrets []secretConfig `json:",omitempty"`
	// WritePaths are the paths the phase may write beneath (Landlock).
	WritePaths []string
}

// secretConfig is one secret file, with its content (also used for
// RunFiles, which are not secret).
type secretConfig struct {
	Dst  string
	Mode uint32
	Data []byte
}

// execConfig is what init gives the command starter: everything it needs to
// confine itself and execute the command.
type execConfig struct {
	Args       []string
	Env        []string
	Dir        string
	WritePaths []string
}

// report is a message from init to Run.
type report struct {
	// Type is one of the report* constants.
	Type string
	// Phase is "setup" or "agent".
	Phase string `json:",omitempty"`
	// Code and Signal are a phase's exit status (reportExit).
	Code   int    `json:",omitempty"`
	Signal string `json:",omitempty"`
	// Kind and Msg describe an error (reportError): Kind is one of the
	// kind* constants.
	Kind string `json:",omitempty"`
	Msg  string `json:",omitempty"`
}

// Report types.
const (
	reportStarted = "started" // a phase's command was executed
	reportExit    = "exit"    // a phase's command ended
	reportError   = "error"   // init or the starter failed
)

// execFailure is what the command starter writes to its status pipe when it
// cannot execute the command; on success the pipe closes empty.
type execFailure struct {
	Kind string
	Msg  string
}
