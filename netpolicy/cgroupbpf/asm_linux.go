package cgroupbpf

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// The programs, written with cilium/ebpf's asm package so that building
// needs no C compiler and no generated object files. Each program is
// straight-line code with forward jumps only (the port loop is unrolled);
// shared pieces are Go functions that emit instructions with fresh labels.
//
// Register use in the sock_addr and skb programs:
//
//	R6  the context (bpf_sock_addr or __sk_buff)
//	R7  the config map value
//	R8  the destination port, host order (sock_addr); the socket's
//	    protocol (egress)
//	R9  the Proto bit of the socket's protocol, 0 for anything else
//	    (sock_addr); the first header byte (egress); the ring buffer record
//	    while an event is written
//
// The decision's key (destination, port, protocol, verdict, family) is built
// on the stack in the layout of the counter map key, so that it is the key
// of the audit counter and the body of the event as is.

// Stack slots, relative to R10.
const (
	sNow     = -8   // u64 boot ns
	sPidTgid = -16  // u64
	sCgroup  = -24  // u64
	sKey     = -48  // counter key, ckSize bytes
	sZero    = -52  // u32 0: the key of the array maps
	sHook    = -56  // u8 Hook
	sLPM6    = -80  // IPv6 trie key
	sLPM4    = -88  // IPv4 trie key
	sCnt     = -112 // counter value
	sRawPort = -116 // u32 user_port as the context holds it
	sHdr     = -176 // 48 bytes of packet header (egress)

	sAddr4 = sKey + 12 // the IPv4 address inside the mapped key address
)

// bpf_sock_addr offsets.
const (
	saUserIP4  = 4
	saUserIP6  = 8
	saUserPort = 24
	saProtocol = 36
	saSk       = 64
)

// __sk_buff and bpf_sock offsets.
const (
	skbIfindex = 40
	skbSk      = 168

	bsType     = 8
	bsProtocol = 12
)

const (
	sockStream = 1
	sockDgram  = 2

	loopbackIfindex = 1 // every network namespace's lo
	bpfNoExist      = 1 // BPF_NOEXIST
	skStorageCreate = 1 // BPF_SK_STORAGE_GET_F_CREATE
	eexist          = 17
)

// mapFDs are the maps the programs reference.
type mapFDs struct {
	config, rules4, rules6, addrs, counters, events, stats, orig int
}

type builder struct {
	insns   asm.Instructions
	pending string
	seq     int
	fd      mapFDs
}

func (b *builder) emit(ins ...asm.Instruction) {
	for _, in := range ins {
		if b.pending != "" {
			in = in.WithSymbol(b.pending)
			b.pending = ""
		}
		b.insns = append(b.insns, in)
	}
}

// label names the next instruction. Two labels in a row are joined by a
// jump to the second.
func (b *builder) label(name string) {
	if b.pending != "" {
		b.emit(asm.Ja.Label(name))
	}
	b.pending = name
}

func (b *builder) fresh(prefix string) string {
	b.seq++
	return fmt.Sprintf("%s_%d", prefix, b.seq)
}

func (b *builder) call(fn asm.BuiltinFunc) { b.emit(fn.Call()) }

// storeImm64 is `*(u64 *)(dst + off) = v`, which asm.StoreImm does not emit.
func storeImm64(dst asm.Register, off int16, v int32) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: dst, Offset: off, Constant: int64(v)}
}

// stackPtr sets r to R10+off.
func (b *builder) stackPtr(r asm.Register, off int16) {
	b.emit(asm.Mov.Reg(r, asm.RFP), asm.Add.Imm(r, int32(off)))
}

// lookup calls bpf_map_lookup_elem(fd, R10+keyOff); R0 is the value or 0.
func (b *builder) lookup(fd int, keyOff int16) {
	b.emit(asm.LoadMapPtr(asm.R1, fd))
	b.stackPtr(asm.R2, keyOff)
	b.call(asm.FnMapLookupElem)
}

// statsAdd increments the u64 at off of the stats value.
func (b *builder) statsAdd(off int16) {
	skip := b.fresh("stats_done")
	b.lookup(b.fd.stats, sZero)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, skip),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, off),
	)
	b.label(skip)
}

// Labels every decision ends at.
const (
	lAllow    = "allow"
	lDeny     = "deny"
	lRedirect = "redirect"
	lNoConfig = "no_config"
)

// prologue saves the context, stamps the time (unless the program does it
// later, only when it records), zeroes the key and loads the config into R7
// (no config: deny without a record).
func (b *builder) prologue(hook Hook, stamp bool) {
	b.emit(asm.Mov.Reg(asm.R6, asm.R1))
	if stamp {
		b.stamp()
	}
	b.emit(
		storeImm64(asm.RFP, sKey, 0),
		storeImm64(asm.RFP, sKey+8, 0),
		storeImm64(asm.RFP, sKey+16, 0),
		asm.StoreImm(asm.RFP, sZero, 0, asm.Word),
		asm.StoreImm(asm.RFP, sHook, int64(hook), asm.Byte),
	)
	b.lookup(b.fd.config, sZero)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, lNoConfig),
		asm.Mov.Reg(asm.R7, asm.R0),
	)
}

// stamp stores the boot time at sNow.
func (b *builder) stamp() {
	b.call(asm.FnKtimeGetBootNs)
	b.emit(asm.StoreMem(asm.RFP, sNow, asm.R0, asm.DWord))
}

// sockAddrPortProto records the port (R8), the protocol (R9 and the key)
// and the raw port of a bpf_sock_addr context.
func (b *builder) sockAddrPortProto() {
	tcp, udp, done := b.fresh("tcp"), b.fresh("udp"), b.fresh("proto_done")
	b.emit(
		asm.LoadMem(asm.R1, asm.R6, saUserPort, asm.Word),
		asm.StoreMem(asm.RFP, sRawPort, asm.R1, asm.Word),
		asm.LoadMem(asm.R8, asm.R6, saUserPort, asm.Half),
		asm.HostTo(asm.BE, asm.R8, asm.Half),
		asm.StoreMem(asm.RFP, sKey+ckPort, asm.R8, asm.Half),
		asm.LoadMem(asm.R1, asm.R6, saProtocol, asm.Word),
		asm.Mov.Imm(asm.R9, 0),
		asm.JEq.Imm(asm.R1, ipprotoTCP, tcp),
		asm.JEq.Imm(asm.R1, ipprotoMPTCP, tcp),
		asm.JEq.Imm(asm.R1, ipprotoUDP, udp),
		asm.StoreMem(asm.RFP, sKey+ckProto, asm.R1, asm.Byte),
		asm.Ja.Label(done),
	)
	b.label(tcp)
	b.emit(
		asm.Mov.Imm(asm.R9, int32(TCP)),
		asm.StoreImm(asm.RFP, sKey+ckProto, ipprotoTCP, asm.Byte),
		asm.Ja.Label(done),
	)
	b.label(udp)
	b.emit(
		asm.Mov.Imm(asm.R9, int32(UDP)),
		asm.StoreImm(asm.RFP, sKey+ckProto, ipprotoUDP, asm.Byte),
	)
	b.label(done)
}

// loopbackCheck jumps to ok if the destination, already known to be a
// loopback or unspecified address, is the loopback of a network namespace
// other than the host's, or the host's and the config allows that.
func (b *builder) loopbackCheck(ok string) {
	b.emit(asm.Mov.Reg(asm.R1, asm.R6))
	b.call(asm.FnGetNetnsCookie)
	b.emit(
		asm.LoadMem(asm.R1, asm.R7, cfgNetns, asm.DWord),
		asm.JNE.Reg(asm.R0, asm.R1, ok),
		asm.LoadMem(asm.R1, asm.R7, cfgFlags, asm.Word),
		asm.JSet.Imm(asm.R1, cfgFlagHostLoopback, ok),
	)
}

// portCheck jumps to lAllow if the port set at R0 has an entry for the
// port (R8) and protocol (R9) that has not expired.
func (b *builder) portCheck() {
	b.emit(asm.LoadMem(asm.R1, asm.RFP, sNow, asm.DWord))
	for i := range MaxPortRanges {
		o := int16(i * peSize)
		next := b.fresh("next_entry")
		b.emit(
			asm.LoadMem(asm.R2, asm.R0, o+peProtos, asm.Byte),
			asm.And.Reg(asm.R2, asm.R9),
			asm.JEq.Imm(asm.R2, 0, next),
			asm.LoadMem(asm.R2, asm.R0, o+peFirst, asm.Half),
			asm.JGT.Reg(asm.R2, asm.R8, next),
			asm.LoadMem(asm.R2, asm.R0, o+peLast, asm.Half),
			asm.JGT.Reg(asm.R8, asm.R2, next),
			asm.LoadMem(asm.R2, asm.R0, o+peExpires, asm.DWord),
			asm.JEq.Imm(asm.R2, 0, lAllow),
			asm.JGE.Reg(asm.R2, asm.R1, lAllow),
		)
		b.label(next)
	}
}

// dynCheck ends the decision with the dynamic address map: allow on a
// matching entry, else deny.
func (b *builder) dynCheck() {
	b.lookup(b.fd.addrs, sKey+ckAddr)
	b.emit(asm.JEq.Imm(asm.R0, 0, lDeny))
	b.portCheck()
	b.emit(asm.Ja.Label(lDeny))
}

// saveOriginal stores the destination in the socket's storage before a
// DNS redirect (no storage: deny).
func (b *builder) saveOriginal() {
	b.emit(
		asm.LoadMapPtr(asm.R1, b.fd.orig),
		asm.LoadMem(asm.R2, asm.R6, saSk, asm.DWord),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Imm(asm.R4, skStorageCreate),
	)
	b.call(asm.FnSkStorageGet)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, lDeny),
		asm.LoadMem(asm.R1, asm.RFP, sKey, asm.DWord),
		asm.StoreMem(asm.R0, osAddr, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, sKey+8, asm.DWord),
		asm.StoreMem(asm.R0, osAddr+8, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, sRawPort, asm.Word),
		asm.StoreMem(asm.R0, osPort, asm.R1, asm.Word),
		asm.StoreImm(asm.R0, osSet, 1, asm.Word),
	)
}

// setTarget4 rewrites the destination to the IPv4 forwarder: user_ip4 on
// an AF_INET socket, or its v4-mapped form in user_ip6.
func (b *builder) setTarget4(mapped bool) {
	b.emit(asm.LoadMem(asm.R1, asm.R7, cfgDNS4Addr, asm.Word))
	if mapped {
		b.emit(
			asm.StoreMem(asm.R6, saUserIP6+12, asm.R1, asm.Word),
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.R6, saUserIP6, asm.R1, asm.Word),
			asm.StoreMem(asm.R6, saUserIP6+4, asm.R1, asm.Word),
			asm.Mov.Imm32(asm.R1, int32(mappedWord)),
			asm.StoreMem(asm.R6, saUserIP6+8, asm.R1, asm.Word),
		)
	} else {
		b.emit(asm.StoreMem(asm.R6, saUserIP4, asm.R1, asm.Word))
	}
	b.emit(
		asm.LoadMem(asm.R1, asm.R7, cfgDNS4Port, asm.Word),
		asm.StoreMem(asm.R6, saUserPort, asm.R1, asm.Word),
	)
}

// decide4 decides for the IPv4 address at sAddr4 (of an AF_INET socket, or
// v4-mapped on an AF_INET6 one). It always ends at a verdict label.
func (b *builder) decide4(mapped bool) {
	noDNS, lo, notLo, rules, dyn := b.fresh("nodns4"), b.fresh("lo4"), b.fresh("notlo4"), b.fresh("rules4"), b.fresh("dyn4")

	// Every TCP or UDP query to port 53 goes to the forwarder.
	b.emit(
		asm.JEq.Imm(asm.R9, 0, noDNS),
		asm.JNE.Imm(asm.R8, 53, noDNS),
		asm.LoadMem(asm.R1, asm.R7, cfgDNS4Port, asm.Word),
		asm.JEq.Imm(asm.R1, 0, noDNS),
	)
	b.saveOriginal()
	b.setTarget4(mapped)
	b.emit(asm.Ja.Label(lRedirect))

	b.label(noDNS)
	b.emit(
		asm.LoadMem(asm.R1, asm.R7, cfgMode, asm.Word),
		asm.JEq.Imm(asm.R1, int32(ModeUnrestricted), lAllow),
		// 127.0.0.0/8 and 0.0.0.0 (which connects to the local host).
		asm.LoadMem(asm.R1, asm.RFP, sAddr4, asm.Byte),
		asm.JEq.Imm(asm.R1, 127, lo),
		asm.LoadMem(asm.R1, asm.RFP, sAddr4, asm.Word),
		asm.JEq.Imm(asm.R1, 0, lo),
		asm.Ja.Label(notLo),
	)
	b.label(lo)
	b.loopbackCheck(lAllow)

	b.label(notLo)
	b.emit(
		asm.LoadMem(asm.R1, asm.R7, cfgMode, asm.Word),
		asm.JNE.Imm(asm.R1, int32(ModePolicy), lDeny),
		asm.JEq.Imm(asm.R9, 0, lDeny),
		// The forwarder itself.
		asm.LoadMem(asm.R1, asm.R7, cfgDNS4Port, asm.Word),
		asm.JEq.Imm(asm.R1, 0, rules),
		asm.LoadMem(asm.R2, asm.RFP, sRawPort, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, rules),
		asm.LoadMem(asm.R1, asm.R7, cfgDNS4Addr, asm.Word),
		asm.LoadMem(asm.R2, asm.RFP, sAddr4, asm.Word),
		asm.JEq.Reg(asm.R1, asm.R2, lAllow),
	)
	b.label(rules)
	b.emit(
		asm.StoreImm(asm.RFP, sLPM4, 32, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, sAddr4, asm.Word),
		asm.StoreMem(asm.RFP, sLPM4+4, asm.R1, asm.Word),
	)
	b.lookup(b.fd.rules4, sLPM4)
	b.emit(asm.JEq.Imm(asm.R0, 0, dyn))
	b.portCheck()
	b.label(dyn)
	b.dynCheck()
}

// decide6 decides for the IPv6 address at sKey of an AF_INET6 socket;
// v4-mapped addresses go to decide4.
func (b *builder) decide6() {
	native, noDNS := b.fresh("native"), b.fresh("nodns6")
	lo, notLo, rules, dyn := b.fresh("lo6"), b.fresh("notlo6"), b.fresh("rules6"), b.fresh("dyn6")

	b.emit(
		asm.LoadMem(asm.R1, asm.RFP, sKey, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, native),
		asm.LoadMem(asm.R1, asm.RFP, sKey+8, asm.Word),
		asm.JNE.Imm32(asm.R1, int32(mappedWord), native),
	)
	b.decide4(true)

	// Native IPv6 queries go to the IPv6 forwarder only: the kernel refuses
	// a sendmsg6 rewrite to a v4-mapped address (ENOTSUPP).
	b.label(native)
	b.emit(
		asm.JEq.Imm(asm.R9, 0, noDNS),
		asm.JNE.Imm(asm.R8, 53, noDNS),
		asm.LoadMem(asm.R1, asm.R7, cfgDNS6Port, asm.Word),
		asm.JEq.Imm(asm.R1, 0, noDNS),
	)
	b.saveOriginal()
	for k := int16(0); k < 16; k += 4 {
		b.emit(
			asm.LoadMem(asm.R1, asm.R7, cfgDNS6Addr+k, asm.Word),
			asm.StoreMem(asm.R6, saUserIP6+k, asm.R1, asm.Word),
		)
	}
	b.emit(
		asm.LoadMem(asm.R1, asm.R7, cfgDNS6Port, asm.Word),
		asm.StoreMem(asm.R6, saUserPort, asm.R1, asm.Word),
		asm.Ja.Label(lRedirect),
	)

	b.label(noDNS)
	b.emit(
		asm.LoadMem(asm.R1, asm.R7, cfgMode, asm.Word),
		asm.JEq.Imm(asm.R1, int32(ModeUnrestricted), lAllow),
		// ::1 and :: (which connects to the local host).
		asm.LoadMem(asm.R1, asm.RFP, sKey, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, notLo),
		asm.LoadMem(asm.R1, asm.RFP, sKey+8, asm.Word),
		asm.JNE.Imm(asm.R1, 0, notLo),
		asm.LoadMem(asm.R1, asm.RFP, sKey+12, asm.Word),
		asm.JEq.Imm(asm.R1, 0, lo),
		asm.JEq.Imm32(asm.R1, int32(word(0, 0, 0, 1)), lo),
		asm.Ja.Label(notLo),
	)
	b.label(lo)
	b.loopbackCheck(lAllow)

	b.label(notLo)
	b.emit(
		asm.LoadMem(asm.R1, asm.R7, cfgMode, asm.Word),
		asm.JNE.Imm(asm.R1, int32(ModePolicy), lDeny),
		asm.JEq.Imm(asm.R9, 0, lDeny),
		asm.LoadMem(asm.R1, asm.R7, cfgDNS6Port, asm.Word),
		asm.JEq.Imm(asm.R1, 0, rules),
		asm.LoadMem(asm.R2, asm.RFP, sRawPort, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, rules),
	)
	for k := int16(0); k < 16; k += 4 {
		b.emit(
			asm.LoadMem(asm.R1, asm.R7, cfgDNS6Addr+k, asm.Word),
			asm.LoadMem(asm.R2, asm.RFP, sKey+k, asm.Word),
			asm.JNE.Reg(asm.R1, asm.R2, rules),
		)
	}
	b.emit(asm.Ja.Label(lAllow))

	b.label(rules)
	b.emit(asm.StoreImm(asm.RFP, sLPM6, 128, asm.Word))
	for k := int16(0); k < 16; k += 4 {
		b.emit(
			asm.LoadMem(asm.R1, asm.RFP, sKey+k, asm.Word),
			asm.StoreMem(asm.RFP, sLPM6+4+k, asm.R1, asm.Word),
		)
	}
	b.lookup(b.fd.rules6, sLPM6)
	b.emit(asm.JEq.Imm(asm.R0, 0, dyn))
	b.portCheck()
	b.label(dyn)
	b.dynCheck()
}

// bump adds one to the counter at R0 and stamps it, then goes on to the
// event for a denial or to done.
func (b *builder) bump(event, done string) {
	b.emit(
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, cvCount),
		asm.LoadMem(asm.R1, asm.RFP, sNow, asm.DWord),
		asm.StoreMem(asm.R0, cvLast, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, sKey+ckVerdict, asm.Byte),
		asm.JEq.Imm(asm.R1, int32(VerdictDenied), event),
		asm.Ja.Label(done),
	)
}

// verdictLabel is a label a decision ends at, and its verdict.
type verdictLabel struct {
	label   string
	verdict Verdict
}

var allVerdicts = []verdictLabel{{lAllow, VerdictAllowed}, {lDeny, VerdictDenied}, {lRedirect, VerdictRedirected}}

// epilogue emits the verdict labels (only those the program jumps to: the
// verifier rejects unreachable code), the audit counter, the event and the
// return: 1 (let through) unless the verdict is a denial.
func (b *builder) epilogue(verdicts []verdictLabel) {
	record, fresh, retry, full, event, lost, done, exit :=
		b.fresh("record"), b.fresh("new_counter"), b.fresh("retry"), b.fresh("counters_full"),
		b.fresh("event"), b.fresh("event_lost"), b.fresh("done"), b.fresh("exit")

	for _, v := range verdicts {
		b.label(v.label)
		b.emit(
			asm.StoreImm(asm.RFP, sKey+ckVerdict, int64(v.verdict), asm.Byte),
			asm.Ja.Label(record),
		)
	}

	// Count the decision; a new counter means a new destination: report it.
	b.label(record)
	b.lookup(b.fd.counters, sKey)
	b.emit(asm.JEq.Imm(asm.R0, 0, fresh))
	b.bump(event, done)
	b.label(fresh)
	b.emit(
		storeImm64(asm.RFP, sCnt+cvCount, 1),
		asm.LoadMem(asm.R1, asm.RFP, sNow, asm.DWord),
		asm.StoreMem(asm.RFP, sCnt+cvFirst, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, sCnt+cvLast, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, b.fd.counters),
	)
	b.stackPtr(asm.R2, sKey)
	b.stackPtr(asm.R3, sCnt)
	b.emit(asm.Mov.Imm(asm.R4, bpfNoExist))
	b.call(asm.FnMapUpdateElem)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, event),
		asm.JNE.Imm(asm.R0, -eexist, full),
	)
	// Another CPU created it in between.
	b.label(retry)
	b.lookup(b.fd.counters, sKey)
	b.emit(asm.JEq.Imm(asm.R0, 0, event))
	b.bump(event, done)
	b.label(full)
	b.statsAdd(stFull)

	b.label(event)
	b.call(asm.FnGetCurrentPidTgid)
	b.emit(asm.StoreMem(asm.RFP, sPidTgid, asm.R0, asm.DWord))
	b.call(asm.FnGetCurrentCgroupId)
	b.emit(
		asm.StoreMem(asm.RFP, sCgroup, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, b.fd.events),
		asm.Mov.Imm(asm.R2, eventSize),
		asm.Mov.Imm(asm.R3, 0),
	)
	b.call(asm.FnRingbufReserve)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, lost),
		asm.Mov.Reg(asm.R9, asm.R0),
	)
	for _, c := range []struct{ from, to int16 }{
		{sNow, evTime}, {sCgroup, evCgroup}, {sPidTgid, evPidTgid},
		{sKey + ckAddr, evAddr}, {sKey + ckAddr + 8, evAddr + 8}, {sKey + evKeyBytes, evPort},
	} {
		b.emit(
			asm.LoadMem(asm.R1, asm.RFP, c.from, asm.DWord),
			asm.StoreMem(asm.R9, c.to, asm.R1, asm.DWord),
		)
	}
	b.emit(
		asm.LoadMem(asm.R1, asm.RFP, sHook, asm.Byte),
		asm.StoreMem(asm.R9, evHook, asm.R1, asm.Byte),
		asm.Mov.Reg(asm.R1, asm.R9),
		asm.Mov.Imm(asm.R2, 0),
	)
	b.call(asm.FnRingbufSubmit)
	b.emit(asm.Ja.Label(done))
	b.label(lost)
	b.statsAdd(stLost)

	b.label(done)
	b.emit(
		asm.LoadMem(asm.R1, asm.RFP, sKey+ckVerdict, asm.Byte),
		asm.Mov.Imm(asm.R0, 1),
		asm.JNE.Imm(asm.R1, int32(VerdictDenied), exit),
		asm.Mov.Imm(asm.R0, 0),
	)
	b.label(exit)
	b.emit(asm.Return())
	b.label(lNoConfig)
	b.emit(asm.Mov.Imm(asm.R0, 0), asm.Return())
}

// sockAddrProgram is connect4/6 or sendmsg4/6.
func sockAddrProgram(fd mapFDs, hook Hook, v6 bool) asm.Instructions {
	b := &builder{fd: fd}
	b.prologue(hook, true)
	if v6 {
		for k := int16(0); k < 16; k += 4 {
			b.emit(
				asm.LoadMem(asm.R1, asm.R6, saUserIP6+k, asm.Word),
				asm.StoreMem(asm.RFP, sKey+k, asm.R1, asm.Word),
			)
		}
		b.emit(asm.StoreImm(asm.RFP, sKey+ckFamily, afInet6, asm.Byte))
	} else {
		b.emit(
			asm.Mov.Imm32(asm.R1, int32(mappedWord)),
			asm.StoreMem(asm.RFP, sKey+8, asm.R1, asm.Word),
			asm.LoadMem(asm.R1, asm.R6, saUserIP4, asm.Word),
			asm.StoreMem(asm.RFP, sAddr4, asm.R1, asm.Word),
			asm.StoreImm(asm.RFP, sKey+ckFamily, afInet, asm.Byte),
		)
	}
	b.sockAddrPortProto()
	if v6 {
		b.decide6()
	} else {
		b.decide4(false)
	}
	b.epilogue(allVerdicts)
	return b.insns
}
