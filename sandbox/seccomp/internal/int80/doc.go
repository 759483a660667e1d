// Package int80 makes i386-ABI system calls from a 64-bit process with the
// INT $0x80 instruction, so that tests can prove the seccomp filter covers
// the i386 ABI too: the kernel reports such calls with
// seccomp_data.arch == AUDIT_ARCH_I386 and i386 system call numbers, whatever
// the bitness of the calling process.
//
// It exists only for the tests of sandbox/seccomp and is empty outside
// linux/amd64.
package int80
