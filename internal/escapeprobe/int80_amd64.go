//go:build linux

package main

// int80 makes an i386 system call with `int $0x80` from 64-bit code and
// returns EAX. Only five arguments: none of the calls made needs the sixth
// (EBP), which Go uses as its frame pointer.
func int80(nr, a1, a2, a3, a4, a5 uintptr) (ret uintptr)

// int80NoChild is int80 for clone: if the call creates a child (EAX = 0 in
// it), the child calls exit_group at once instead of running Go code.
func int80NoChild(nr, a1, a2, a3, a4, a5 uintptr) (ret uintptr)

func int80Call(c rawCall) (uintptr, error) {
	a := c.args
	if c.nr == i386CloneNr {
		return int80NoChild(c.nr, a[0], a[1], a[2], a[3], a[4]), nil
	}
	return int80(c.nr, a[0], a[1], a[2], a[3], a[4]), nil
}
