package hookbatch

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// exitProgram returns a static ELF executable for goarch (runtime.GOARCH)
// that only exits with status 0 (exit_group(0)): what the masked entries
// run. nil for an architecture it has no code for.
func exitProgram(goarch string) []byte {
	var machine elf.Machine
	var code []byte
	switch goarch {
	case "amd64":
		machine = elf.EM_X86_64
		// mov $231, %eax (exit_group); xor %edi, %edi; syscall
		code = []byte{0xb8, 0xe7, 0x00, 0x00, 0x00, 0x31, 0xff, 0x0f, 0x05}
	case "arm64":
		machine = elf.EM_AARCH64
		// mov x8, #94 (exit_group); mov x0, #0; svc #0
		for _, ins := range []uint32{0xd2800bc8, 0xd2800000, 0xd4000001} {
			code = binary.LittleEndian.AppendUint32(code, ins)
		}
	default:
		return nil
	}
	// One loadable segment, read and execute, holding the headers and
	// the code after them; loaded at 4 MiB, aligned for 64 KiB pages.
	const (
		base    = 0x400000
		hdrSize = 64
		phSize  = 56
	)
	size := uint64(hdrSize + phSize + len(code))
	var b bytes.Buffer
	// Writes to a bytes.Buffer of fixed-size values do not fail.
	_ = binary.Write(&b, binary.LittleEndian, elf.Header64{
		Ident:     [elf.EI_NIDENT]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:      uint16(elf.ET_EXEC),
		Machine:   uint16(machine),
		Version:   uint32(elf.EV_CURRENT),
		Entry:     base + hdrSize + phSize,
		Phoff:     hdrSize,
		Ehsize:    hdrSize,
		Phentsize: phSize,
		Phnum:     1,
	})
	_ = binary.Write(&b, binary.LittleEndian, elf.Prog64{
		Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X),
		Vaddr: base, Paddr: base, Filesz: size, Memsz: size, Align: 0x10000,
	})
	b.Write(code)
	return b.Bytes()
}
