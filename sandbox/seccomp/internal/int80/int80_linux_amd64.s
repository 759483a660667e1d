#include "textflag.h"

// func Syscall(trap, a1, a2, a3, a4, a5, a6 uint64) (r uint64)
TEXT ·Syscall(SB), NOSPLIT, $0-64
	MOVQ BP, R12 // BP is the frame pointer; INT $0x80 preserves R12
	MOVQ trap+0(FP), AX
	MOVQ a1+8(FP), BX
	MOVQ a2+16(FP), CX
	MOVQ a3+24(FP), DX
	MOVQ a4+32(FP), SI
	MOVQ a5+40(FP), DI
	MOVQ a6+48(FP), BP
	INT  $0x80
	MOVQ R12, BP
	MOVQ AX, r+56(FP)
	RET
