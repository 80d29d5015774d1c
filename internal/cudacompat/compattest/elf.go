// Package compattest builds the ELF files the tests of CUDA forward
// compatibility read: compat libcuda stand-ins carrying (or lacking)
// NVIDIA's forward-compatibility note. For tests only.
package compattest

import (
	"encoding/binary"
	"slices"
)

// NoteELF returns a small ELF64 shared object whose only section besides
// the section names is a note section (name, type SHT_NOTE, alignment
// align) holding one note of owner with the descriptor desc; "" as the
// section name gives an object without sections but the names.
func NoteELF(section, owner, desc string, align uint64) []byte {
	pad := func(b []byte, a uint64) []byte {
		for uint64(len(b))%a != 0 {
			b = append(b, 0)
		}
		return b
	}
	le := binary.LittleEndian
	var note []byte
	note = le.AppendUint32(note, uint32(len(owner)+1))
	note = le.AppendUint32(note, uint32(len(desc)))
	note = le.AppendUint32(note, 1)
	note = pad(append(note, append([]byte(owner), 0)...), align)
	note = pad(append(note, desc...), align)
	shstr := []byte("\x00.shstrtab\x00" + section + "\x00")
	body := append(slices.Clone(note), shstr...)
	shoff := uint64(64 + len(body))
	var out []byte
	out = append(out, 0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	out = le.AppendUint16(out, 3)  // ET_DYN
	out = le.AppendUint16(out, 62) // x86-64
	out = le.AppendUint32(out, 1)
	out = le.AppendUint64(out, 0)     // entry
	out = le.AppendUint64(out, 0)     // phoff
	out = le.AppendUint64(out, shoff) // shoff
	out = le.AppendUint32(out, 0)
	out = le.AppendUint16(out, 64) // ehsize
	out = le.AppendUint16(out, 56) // phentsize
	out = le.AppendUint16(out, 0)  // phnum
	out = le.AppendUint16(out, 64) // shentsize
	nsec := uint16(3)
	if section == "" {
		nsec = 2
	}
	out = le.AppendUint16(out, nsec)
	out = le.AppendUint16(out, 1) // shstrndx
	out = append(out, body...)
	shdr := func(name, typ uint32, off, size, align uint64) {
		out = le.AppendUint32(out, name)
		out = le.AppendUint32(out, typ)
		out = le.AppendUint64(out, 0) // flags
		out = le.AppendUint64(out, 0) // addr
		out = le.AppendUint64(out, off)
		out = le.AppendUint64(out, size)
		out = le.AppendUint32(out, 0) // link
		out = le.AppendUint32(out, 0) // info
		out = le.AppendUint64(out, align)
		out = le.AppendUint64(out, 0) // entsize
	}
	shdr(0, 0, 0, 0, 0)
	shdr(1, 3, 64+uint64(len(note)), uint64(len(shstr)), 1)
	if section != "" {
		shdr(uint32(len("\x00.shstrtab\x00")), 7, 64, uint64(len(note)), align)
	}
	return out
}

// The note a forward-compatibility libcuda carries (as CUDA 13.0's): its
// section, its owner and a descriptor listing the driver branches it
// supports.
const (
	Section = ".note.cuda.fwd_compatibility"
	Owner   = "NVIDIA Corporation"
	CUDA13  = `{"Format":1,"CUDA Version":"13.0","Driver":[535,550,570,580],"Device":[]}`
)
