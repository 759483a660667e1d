package int80

// Syscall performs the i386 system call trap with the six arguments in
// EBX, ECX, EDX, ESI, EDI and EBP (the full 64-bit registers are loaded, so a
// caller can also put bits in their upper halves), and returns RAX. The i386
// ABI returns -errno (-4095..-1) in EAX on failure; see Errno.
//
// Pointer arguments are read by the kernel as 32-bit addresses: pass 0 or
// addresses below 4 GiB only.
func Syscall(trap, a1, a2, a3, a4, a5, a6 uint64) (r uint64)

// Errno splits an i386 system call result into its value and its errno
// (0 on success), from the low 32 bits as the i386 ABI defines them.
func Errno(r uint64) (val int32, errno uint32) {
	v := int32(uint32(r))
	if v < 0 && v >= -4095 {
		return v, uint32(-v)
	}
	return v, 0
}
