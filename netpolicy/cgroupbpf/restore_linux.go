package cgroupbpf

import "github.com/cilium/ebpf/asm"

// restoreProgram is recvmsg4/6 or getpeername4/6: where the peer is the
// forwarder and the socket was redirected, it shows the original server.
// These hooks must return 1.
func restoreProgram(fd mapFDs, v6 bool) asm.Instructions {
	b := &builder{fd: fd}
	out, restore, try4 := b.fresh("out"), b.fresh("restore"), b.fresh("try4")
	b.emit(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.StoreImm(asm.RFP, sZero, 0, asm.Word),
	)
	b.lookup(fd.config, sZero)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, out),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R8, asm.R6, saUserPort, asm.Word),
	)
	if v6 {
		b.emit(
			asm.LoadMem(asm.R1, asm.R7, cfgDNS6Port, asm.Word),
			asm.JEq.Imm(asm.R1, 0, try4),
			asm.JNE.Reg(asm.R1, asm.R8, try4),
		)
		for k := int16(0); k < 16; k += 4 {
			b.emit(
				asm.LoadMem(asm.R1, asm.R7, cfgDNS6Addr+k, asm.Word),
				asm.LoadMem(asm.R2, asm.R6, saUserIP6+k, asm.Word),
				asm.JNE.Reg(asm.R1, asm.R2, try4),
			)
		}
		b.emit(asm.Ja.Label(restore))
		b.label(try4)
		b.emit(
			asm.LoadMem(asm.R1, asm.R7, cfgDNS4Port, asm.Word),
			asm.JEq.Imm(asm.R1, 0, out),
			asm.JNE.Reg(asm.R1, asm.R8, out),
			asm.LoadMem(asm.R1, asm.R6, saUserIP6, asm.Word),
			asm.JNE.Imm(asm.R1, 0, out),
			asm.LoadMem(asm.R1, asm.R6, saUserIP6+4, asm.Word),
			asm.JNE.Imm(asm.R1, 0, out),
			asm.LoadMem(asm.R1, asm.R6, saUserIP6+8, asm.Word),
			asm.JNE.Imm32(asm.R1, int32(mappedWord), out),
			asm.LoadMem(asm.R1, asm.R7, cfgDNS4Addr, asm.Word),
			asm.LoadMem(asm.R2, asm.R6, saUserIP6+12, asm.Word),
			asm.JNE.Reg(asm.R1, asm.R2, out),
		)
	} else {
		b.emit(
			asm.LoadMem(asm.R1, asm.R7, cfgDNS4Port, asm.Word),
			asm.JEq.Imm(asm.R1, 0, out),
			asm.JNE.Reg(asm.R1, asm.R8, out),
			asm.LoadMem(asm.R1, asm.R7, cfgDNS4Addr, asm.Word),
			asm.LoadMem(asm.R2, asm.R6, saUserIP4, asm.Word),
			asm.JNE.Reg(asm.R1, asm.R2, out),
		)
	}
	b.label(restore)
	b.emit(
		asm.LoadMapPtr(asm.R1, fd.orig),
		asm.LoadMem(asm.R2, asm.R6, saSk, asm.DWord),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Imm(asm.R4, 0),
	)
	b.call(asm.FnSkStorageGet)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, out),
		asm.LoadMem(asm.R1, asm.R0, osSet, asm.Word),
		asm.JEq.Imm(asm.R1, 0, out),
	)
	if v6 {
		for k := int16(0); k < 16; k += 4 {
			b.emit(
				asm.LoadMem(asm.R1, asm.R0, osAddr+k, asm.Word),
				asm.StoreMem(asm.R6, saUserIP6+k, asm.R1, asm.Word),
			)
		}
	} else {
		// An AF_INET socket only ever had IPv4 originals; check anyway.
		b.emit(
			asm.LoadMem(asm.R1, asm.R0, osAddr, asm.DWord),
			asm.JNE.Imm(asm.R1, 0, out),
			asm.LoadMem(asm.R1, asm.R0, osAddr+8, asm.Word),
			asm.JNE.Imm32(asm.R1, int32(mappedWord), out),
			asm.LoadMem(asm.R1, asm.R0, osAddr+12, asm.Word),
			asm.StoreMem(asm.R6, saUserIP4, asm.R1, asm.Word),
		)
	}
	b.emit(
		asm.LoadMem(asm.R1, asm.R0, osPort, asm.Word),
		asm.StoreMem(asm.R6, saUserPort, asm.R1, asm.Word),
	)
	b.label(out)
	b.emit(asm.Mov.Imm(asm.R0, 1), asm.Return())
	return b.insns
}
