package doctor

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// A CUDA fat binary (the .nv_fatbin section of an executable or library
// built by nvcc) is a sequence of containers, each a 16-byte header
//
//	magic u32 (0xBA55ED50) | version u16 | header size u16 | payload size u64
//
// followed by entries, each a header of at least 64 bytes
//
//	kind u16 (1 PTX, 2 ELF/SASS) | u16 | header size u32 | payload size u64 |
//	compressed size u32 | u32 | version minor u16 | major u16 | arch u32 | …
//
// and its payload (the PTX text or the cubin). Only the headers are read:
// which code for which architecture the binary carries.
const (
	fatbinMagic          = 0xBA55ED50
	fatbinHeaderSize     = 16
	fatbinEntryMinHeader = 32
	fatbinKindPTX        = 1
	fatbinKindSASS       = 2
	// fatbinMaxEntries bounds the entries read from one section (a large
	// library such as libcublasLt has a few thousand).
	fatbinMaxEntries = 1 << 16
)

// FatbinEntry is one code object of a fat binary.
type FatbinEntry struct {
	// PTX is true for PTX (JIT-compiled by the driver), false for SASS
	// (a cubin for one GPU architecture).
	PTX bool
	// Arch is the architecture number: 80 for sm_80 / compute_80.
	Arch int
}

func (e FatbinEntry) String() string {
	if e.PTX {
		return "compute_" + strconv.Itoa(e.Arch)
	}
	return "sm_" + strconv.Itoa(e.Arch)
}

// ParseFatbin reads the entry headers of the fat binary containers in r
// (size bytes: a .nv_fatbin section). Zero padding between containers is
// skipped; anything else that is not a container is an error.
func ParseFatbin(r io.ReaderAt, size int64) ([]FatbinEntry, error) {
	var out []FatbinEntry
	var hdr [fatbinHeaderSize]byte
	var ehdr [fatbinEntryMinHeader]byte
	le := binary.LittleEndian
	for off := int64(0); off < size; {
		if size-off < fatbinHeaderSize {
			if err := zeros(r, off, size-off); err != nil {
				return out, err
			}
			break
		}
		if _, err := r.ReadAt(hdr[:], off); err != nil {
			return out, fmt.Errorf("fatbin at %#x: %w", off, err)
		}
		if le.Uint32(hdr[0:]) == 0 {
			off += 4 // alignment padding
			continue
		}
		if m := le.Uint32(hdr[0:]); m != fatbinMagic {
			return out, fmt.Errorf("fatbin at %#x: bad magic %#x", off, m)
		}
		hsize, payload := int64(le.Uint16(hdr[6:])), le.Uint64(hdr[8:])
		if hsize < fatbinHeaderSize || payload > uint64(size) || off+hsize+int64(payload) > size {
			return out, fmt.Errorf("fatbin at %#x: header size %d, payload %d exceed the section (%d bytes)", off, hsize, payload, size)
		}
		end := off + hsize + int64(payload)
		for e := off + hsize; e < end; {
			if end-e < fatbinEntryMinHeader {
				return out, fmt.Errorf("fatbin entry at %#x: truncated header", e)
			}
			if _, err := r.ReadAt(ehdr[:], e); err != nil {
				return out, fmt.Errorf("fatbin entry at %#x: %w", e, err)
			}
			kind := le.Uint16(ehdr[0:])
			eh, ep := int64(le.Uint32(ehdr[4:])), le.Uint64(ehdr[8:])
			if eh < fatbinEntryMinHeader || ep > uint64(end) || e+eh+int64(ep) > end {
				return out, fmt.Errorf("fatbin entry at %#x: header size %d, payload %d exceed the container", e, eh, ep)
			}
			switch kind {
			case fatbinKindPTX, fatbinKindSASS:
				if len(out) >= fatbinMaxEntries {
					return out, fmt.Errorf("fatbin: more than %d entries", fatbinMaxEntries)
				}
				out = append(out, FatbinEntry{PTX: kind == fatbinKindPTX, Arch: int(le.Uint32(ehdr[28:]))})
			}
			e += eh + int64(ep)
		}
		off = end
	}
	return out, nil
}

// zeros checks that n bytes at off are zero.
func zeros(r io.ReaderAt, off, n int64) error {
	b := make([]byte, n)
	if _, err := r.ReadAt(b, off); err != nil {
		return fmt.Errorf("fatbin at %#x: %w", off, err)
	}
	for _, c := range b {
		if c != 0 {
			return fmt.Errorf("fatbin at %#x: %d trailing bytes that are not a container", off, n)
		}
	}
	return nil
}

// errNoFatbin: the file is not an ELF file or has no .nv_fatbin section
// (no GPU code).
var errNoFatbin = errors.New("no .nv_fatbin section")

// fileFatbin returns the fat binary entries of the ELF file p of the
// container's tree.
func fileFatbin(fsys containerFiles, p string) ([]FatbinEntry, error) {
	r, err := fsys.open(p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := elf.NewFile(io.NewSectionReader(r, 0, r.Size()))
	if err != nil {
		return nil, errNoFatbin
	}
	s := f.Section(".nv_fatbin")
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 {
		return nil, errNoFatbin
	}
	return ParseFatbin(s, int64(s.Size))
}

// runsOn reports whether code in entries can run on a GPU of compute
// capability cc ("9.0"): SASS of the same major version and a minor no
// higher, or PTX of an architecture no higher (which the driver JIT
// compiles). Architecture-specific SASS (sm_90a) is recorded as 90 and
// treated as sm_90.
func runsOn(entries []FatbinEntry, cc string) (bool, error) {
	maj, min, ok := strings.Cut(cc, ".")
	M, err1 := strconv.Atoi(maj)
	m, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil {
		return false, fmt.Errorf("compute capability %q: want major.minor", cc)
	}
	dev := M*10 + m
	for _, e := range entries {
		switch {
		case e.PTX && e.Arch <= dev:
			return true, nil
		case !e.PTX && e.Arch/10 == M && e.Arch%10 <= m:
			return true, nil
		}
	}
	return false, nil
}

// archList renders entries, unique, sorted.
func archList(entries []FatbinEntry) string {
	var names []string
	for _, e := range entries {
		if s := e.String(); !slices.Contains(names, s) {
			names = append(names, s)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}
