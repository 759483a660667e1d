package cgroupbpf

import (
	"encoding/binary"

	"github.com/cilium/ebpf/asm"
)

// egressProgram is the cgroup_skb/egress backstop. A packet passes if it
// comes from a TCP (SOCK_STREAM) or UDP (SOCK_DGRAM) socket, whose
// destinations connect and sendmsg already policed, and its IP header is
// plain: IPv4 without options and the socket's protocol, IPv6 whose next
// header is the socket's protocol, or a fragment header or the kernel's
// jumbo hop-by-hop header followed by it.
// Options and extension headers could route the packet elsewhere than the
// policed destination (loose source routing, IPv6 routing headers), and
// raw sockets write any header they like. Everything else is dropped, and
// the sender gets EPERM, except on the loopback device of a network
// namespace other than the host's (or the host's, with AllowHostLoopback).
func egressProgram(fd mapFDs) asm.Instructions {
	b := &builder{fd: fd}
	b.prologue(HookEgress, false) // most packets pass: stamp only drops
	pass, unclean, tcp, udp, hdr, v6, hbh, dropped, v4drop := b.fresh("pass"), b.fresh("unclean"),
		b.fresh("tcp"), b.fresh("udp"), b.fresh("hdr"), b.fresh("v6"), b.fresh("hbh"), b.fresh("drop"), b.fresh("v4drop")
	for o := int16(0); o < 48; o += 8 {
		b.emit(storeImm64(asm.RFP, sHdr+o, 0))
	}
	b.emit(
		asm.LoadMem(asm.R1, asm.R7, cfgMode, asm.Word),
		asm.JEq.Imm(asm.R1, int32(ModeUnrestricted), pass),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 0),
	)
	b.stackPtr(asm.R3, sHdr)
	b.emit(asm.Mov.Imm(asm.R4, 20))
	b.call(asm.FnSkbLoadBytes)
	b.emit(
		asm.JNE.Imm(asm.R0, 0, unclean),
		asm.LoadMem(asm.R9, asm.RFP, sHdr, asm.Byte),
		asm.LoadMem(asm.R1, asm.R6, skbSk, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, unclean),
	)
	b.call(asm.FnSkFullsock)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, unclean),
		asm.LoadMem(asm.R8, asm.R0, bsProtocol, asm.Word),
		asm.LoadMem(asm.R1, asm.R0, bsType, asm.Word),
		asm.JEq.Imm(asm.R8, ipprotoTCP, tcp),
		asm.JEq.Imm(asm.R8, ipprotoUDP, udp),
		asm.Ja.Label(unclean),
	)
	b.label(tcp)
	b.emit(
		asm.JNE.Imm(asm.R1, sockStream, unclean),
		asm.Ja.Label(hdr),
	)
	b.label(udp)
	b.emit(asm.JNE.Imm(asm.R1, sockDgram, unclean))
	b.label(hdr)
	b.emit(
		asm.JNE.Imm(asm.R9, 0x45, v6),
		asm.LoadMem(asm.R1, asm.RFP, sHdr+9, asm.Byte),
		asm.JEq.Reg(asm.R1, asm.R8, pass),
		asm.Ja.Label(unclean),
	)
	b.label(v6)
	b.emit(
		asm.Mov.Reg(asm.R1, asm.R9),
		asm.RSh.Imm(asm.R1, 4),
		asm.JNE.Imm(asm.R1, 6, unclean),
		asm.LoadMem(asm.R1, asm.RFP, sHdr+6, asm.Byte),
		asm.JEq.Reg(asm.R1, asm.R8, pass),
		asm.JEq.Imm(asm.R1, 0, hbh),
		asm.JNE.Imm(asm.R1, 44, unclean),
		// Fragment header: its next header is at offset 40.
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 40),
	)
	b.stackPtr(asm.R3, sHdr+24)
	b.emit(asm.Mov.Imm(asm.R4, 1))
	b.call(asm.FnSkbLoadBytes)
	b.emit(
		asm.JNE.Imm(asm.R0, 0, unclean),
		asm.LoadMem(asm.R1, asm.RFP, sHdr+24, asm.Byte),
		asm.JEq.Reg(asm.R1, asm.R8, pass),
		asm.Ja.Label(unclean),
	)
	// Hop-by-hop header: only the 8-byte one the kernel adds to TCP GSO
	// packets longer than 64 KiB, holding the jumbo payload option alone
	// (next header, length 0, option 0xc2 of length 4).
	b.label(hbh)
	b.emit(
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 40),
	)
	b.stackPtr(asm.R3, sHdr+24)
	b.emit(asm.Mov.Imm(asm.R4, 4))
	b.call(asm.FnSkbLoadBytes)
	b.emit(
		asm.JNE.Imm(asm.R0, 0, unclean),
		asm.LoadMem(asm.R1, asm.RFP, sHdr+24, asm.Byte),
		asm.JNE.Reg(asm.R1, asm.R8, unclean),
		asm.LoadMem(asm.R1, asm.RFP, sHdr+25, asm.Byte),
		asm.JNE.Imm(asm.R1, 0, unclean),
		asm.LoadMem(asm.R1, asm.RFP, sHdr+26, asm.Half),
		asm.JEq.Imm(asm.R1, int32(binary.NativeEndian.Uint16([]byte{0xc2, 4})), pass),
	)

	b.label(unclean)
	b.emit(
		asm.LoadMem(asm.R1, asm.R6, skbIfindex, asm.Word),
		asm.JNE.Imm(asm.R1, loopbackIfindex, dropped),
	)
	b.loopbackCheck(pass)

	// Record what is dropped: the packet's protocol and destination.
	b.label(dropped)
	b.stamp()
	b.emit(
		asm.LoadMem(asm.R1, asm.RFP, sHdr, asm.Byte),
		asm.RSh.Imm(asm.R1, 4),
		asm.JEq.Imm(asm.R1, 4, v4drop),
		asm.JNE.Imm(asm.R1, 6, lDeny),
		asm.LoadMem(asm.R1, asm.RFP, sHdr+6, asm.Byte),
		asm.StoreMem(asm.RFP, sKey+ckProto, asm.R1, asm.Byte),
		asm.StoreImm(asm.RFP, sKey+ckFamily, afInet6, asm.Byte),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 24),
	)
	b.stackPtr(asm.R3, sKey+ckAddr)
	b.emit(asm.Mov.Imm(asm.R4, 16))
	b.call(asm.FnSkbLoadBytes)
	b.emit(asm.Ja.Label(lDeny))
	b.label(v4drop)
	b.emit(
		asm.LoadMem(asm.R1, asm.RFP, sHdr+9, asm.Byte),
		asm.StoreMem(asm.RFP, sKey+ckProto, asm.R1, asm.Byte),
		asm.StoreImm(asm.RFP, sKey+ckFamily, afInet, asm.Byte),
		asm.Mov.Imm32(asm.R1, int32(mappedWord)),
		asm.StoreMem(asm.RFP, sKey+8, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, sHdr+16, asm.Word),
		asm.StoreMem(asm.RFP, sAddr4, asm.R1, asm.Word),
		asm.Ja.Label(lDeny),
	)
	b.label(pass)
	b.emit(asm.Mov.Imm(asm.R0, 1), asm.Return())
	b.epilogue([]verdictLabel{{lDeny, VerdictDenied}})
	return b.insns
}
