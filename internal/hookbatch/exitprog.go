package hookbatch

import (
	"bytes"
	"encoding/binary"
)

// The ELF values the exit program's headers hold (debug/elf's names; that
// package is not linked into the hook binary, whose start it would slow by
// its compression dependencies' initialisers).
const (
	emX8664   = 62  // EM_X86_64
	emAArch64 = 183 // EM_AARCH64
	etExec    = 2   // ET_EXEC
	ptLoad    = 1   // PT_LOAD
	pfX       = 1   // PF_X
	pfR       = 4   // PF_R
	evCurrent = 1   // EV_CURRENT
	class64   = 2   // ELFCLASS64
	dataLSB   = 1   // ELFDATA2LSB
)

// elfHeader64 and elfProg64 are an ELF64 file header and program header
// (Elf64_Ehdr, Elf64_Phdr), written little-endian.
type elfHeader64 struct {
	Ident     [16]byte
	Type      uint16
	Machine   uint16
	Version   uint32
	Entry     uint64
	Phoff     uint64
	Shoff     uint64
	Flags     uint32
	Ehsize    uint16
	Phentsize uint16
	Phnum     uint16
	Shentsize uint16
	Shnum     uint16
	Shstrndx  uint16
}

type elfProg64 struct {
	Type   uint32
	Flags  uint32
	Off    uint64
	Vaddr  uint64
	Paddr  uint64
	Filesz uint64
	Memsz  uint64
	Align  uint64
}

// exitProgram returns a static ELF executable for goarch (runtime.GOARCH)
// that only exits with status 0 (exit_group(0)): what the masked entries
// run. nil for an architecture it has no code for.
func exitProgram(goarch string) []byte {
	var machine uint16
	var code []byte
	switch goarch {
	case "amd64":
		machine = emX8664
		// mov $231, %eax (exit_group); xor %edi, %edi; syscall
		code = []byte{0xb8, 0xe7, 0x00, 0x00, 0x00, 0x31, 0xff, 0x0f, 0x05}
	case "arm64":
		machine = emAArch64
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
	_ = binary.Write(&b, binary.LittleEndian, elfHeader64{
		Ident:     [16]byte{0x7f, 'E', 'L', 'F', class64, dataLSB, evCurrent},
		Type:      etExec,
		Machine:   machine,
		Version:   evCurrent,
		Entry:     base + hdrSize + phSize,
		Phoff:     hdrSize,
		Ehsize:    hdrSize,
		Phentsize: phSize,
		Phnum:     1,
	})
	_ = binary.Write(&b, binary.LittleEndian, elfProg64{
		Type: ptLoad, Flags: pfR | pfX,
		Vaddr: base, Paddr: base, Filesz: size, Memsz: size, Align: 0x10000,
	})
	b.Write(code)
	return b.Bytes()
}
