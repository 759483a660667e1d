package seccomp

import (
	"encoding/binary"
	"fmt"
)

// seccompData is struct seccomp_data as the kernel hands it to the filter.
type seccompData struct {
	nr   uint32 // int in the kernel; the filter reads it as 32 bits
	arch uint32
	ip   uint64
	args [6]uint64
}

func (d seccompData) bytes() []byte {
	b := make([]byte, dataLen)
	binary.LittleEndian.PutUint32(b[offNr:], d.nr)
	binary.LittleEndian.PutUint32(b[offArch:], d.arch)
	binary.LittleEndian.PutUint64(b[8:], d.ip)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[offArgs+8*i:], a)
	}
	return b
}

// validate checks what the kernel's classic BPF checker and seccomp's own
// check require of the instructions this package emits: known opcodes,
// aligned loads inside seccomp_data, jumps inside the program, a return last.
func validate(prog []instruction) error {
	if len(prog) == 0 || len(prog) > maxInstructions {
		return fmt.Errorf("program has %d instructions", len(prog))
	}
	for pc, in := range prog {
		switch in.code {
		case opLdAbsW:
			if in.k%4 != 0 || in.k+4 > dataLen {
				return fmt.Errorf("pc %d: load at %d", pc, in.k)
			}
		case opJa:
			if uint64(pc)+1+uint64(in.k) >= uint64(len(prog)) {
				return fmt.Errorf("pc %d: ja %d out of the program", pc, in.k)
			}
		case opJeqK, opJgtK, opJgeK, opJsetK:
			if pc+1+int(max(in.jt, in.jf)) >= len(prog) {
				return fmt.Errorf("pc %d: jump %d/%d out of the program", pc, in.jt, in.jf)
			}
		case opRetK:
		default:
			return fmt.Errorf("pc %d: opcode %#x", pc, in.code)
		}
	}
	if prog[len(prog)-1].code != opRetK {
		return fmt.Errorf("last instruction is %#x, not a return", prog[len(prog)-1].code)
	}
	return nil
}

// run interprets a validated program on d and returns its verdict and the
// number of instructions executed.
func run(prog []instruction, d seccompData) (verdict uint32, steps int, err error) {
	data := d.bytes()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		steps++
		switch in.code {
		case opLdAbsW:
			a = binary.LittleEndian.Uint32(data[in.k:])
		case opJa:
			pc += int(in.k)
		case opJeqK, opJgtK, opJgeK, opJsetK:
			var cond bool
			switch in.code {
			case opJeqK:
				cond = a == in.k
			case opJgtK:
				cond = a > in.k
			case opJgeK:
				cond = a >= in.k
			case opJsetK:
				cond = a&in.k != 0
			}
			if cond {
				pc += int(in.jt)
			} else {
				pc += int(in.jf)
			}
		case opRetK:
			return in.k, steps, nil
		default:
			return 0, steps, fmt.Errorf("pc %d: opcode %#x", pc, in.code)
		}
	}
	return 0, steps, fmt.Errorf("fell off the end of the program")
}
