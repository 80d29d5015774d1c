package configure

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Device cgroup BPF program context (struct bpf_cgroup_dev_ctx):
// access_type (u32: access << 16 | type), major (u32), minor (u32).
const (
	bpfDevTypeChar    = 2 // BPF_DEVCG_DEV_CHAR
	bpfDevAccessRead  = 2 // BPF_DEVCG_ACC_READ
	bpfDevAccessWrite = 4 // BPF_DEVCG_ACC_WRITE
	bpfFAllowMulti    = 2 // BPF_F_ALLOW_MULTI
)

// deviceFilter builds a BPF_CGROUP_DEVICE program that allows read/write
// (no mknod) access to the character devices in rules and otherwise runs
// next, the instructions of the program it replaces (which decides for
// every other device exactly as before). Registers: r1 (the context) is
// left untouched for next; r2-r5 and r0 are scratch, which next may assume
// nothing about.
func deviceFilter(rules []deviceRule, next asm.Instructions) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // access_type
		asm.Mov.Reg32(asm.R3, asm.R2),
		asm.And.Imm32(asm.R2, 0xffff),            // r2 = type
		asm.RSh.Imm32(asm.R3, 16),                // r3 = access
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word), // r4 = major
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word), // r5 = minor
	}
	label := func(i int) string { return fmt.Sprintf("nctk_rule_%d", i) }
	for i, r := range rules {
		skip := label(i + 1)
		block := asm.Instructions{
			asm.JNE.Imm(asm.R2, bpfDevTypeChar, skip),
			asm.Mov.Reg32(asm.R0, asm.R3),
			asm.And.Imm32(asm.R0, ^int32(bpfDevAccessRead|bpfDevAccessWrite)),
			asm.JNE.Imm(asm.R0, 0, skip), // asks for more than read/write
			asm.JNE.Imm32(asm.R4, int32(r.Major), skip),
			asm.JNE.Imm32(asm.R5, int32(r.Minor), skip),
			asm.Mov.Imm(asm.R0, 1),
			asm.Return(),
		}
		if i > 0 {
			block[0] = block[0].WithSymbol(label(i))
		}
		insns = append(insns, block...)
	}
	// The fall-through target: a harmless instruction carrying the label,
	// then the replaced program (its jumps are relative, so it can be
	// appended unchanged), or "deny" when there is none.
	insns = append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol(label(len(rules))))
	if len(next) == 0 {
		return append(insns, asm.Return())
	}
	return append(insns, next...)
}

// bpfChange is a replaced set of device programs.
type bpfChange struct {
	cgroup   int
	old, new []*ebpf.Program
}

// allowDevicesV2 lets the container's cgroup v2 device programs also allow
// rules. Every attached BPF_CGROUP_DEVICE program (all must allow an
// access) is replaced by deviceFilter(rules, program): the new programs are
// attached first (ALLOW_MULTI, as runc and systemd attach theirs), then the
// old ones detached; the container is not running yet. When no program is
// attached, the cgroup allows every device and nothing is changed.
// The programs are queried, attached and detached through cgroupfd, the
// cgroup's opened directory (dir names it in messages), duplicated for
// the change.
func allowDevicesV2(cgroupfd int, dir string, rules []deviceRule) (cgroupChange, error) {
	fd, err := unix.FcntlInt(uintptr(cgroupfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate cgroup %s: %w", dir, err)
	}
	ch := &bpfChange{cgroup: fd}
	ok := false
	defer func() {
		if !ok {
			ch.close()
		}
	}()
	res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return nil, fmt.Errorf("query device programs of cgroup %s: %w", dir, err)
	}
	for _, ap := range res.Programs {
		old, err := ebpf.NewProgramFromID(ap.ID)
		if err != nil {
			return nil, fmt.Errorf("open device program %d of cgroup %s: %w", ap.ID, dir, err)
		}
		ch.old = append(ch.old, old)
	}
	if len(ch.old) == 0 {
		ok = true
		ch.close()
		return noChange{}, nil
	}
	for _, old := range ch.old {
		info, err := old.Info()
		if err != nil {
			return nil, fmt.Errorf("inspect device program of cgroup %s: %w", dir, err)
		}
		insns, err := info.Instructions()
		if err != nil {
			return nil, fmt.Errorf("read device program of cgroup %s: %w", dir, err)
		}
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "nctk_devices",
			Type:         ebpf.CGroupDevice,
			AttachType:   ebpf.AttachCGroupDevice,
			Instructions: deviceFilter(rules, insns),
			License:      "Apache",
		})
		if err != nil {
			return nil, fmt.Errorf("load device filter for cgroup %s: %w", dir, err)
		}
		ch.new = append(ch.new, p)
	}
	for i, p := range ch.new {
		if err := attach(fd, p); err != nil {
			ch.new = ch.new[:i] // attached ones are detached by Revert
			ch.Revert()
			return nil, fmt.Errorf("attach device filter to cgroup %s: %w", dir, err)
		}
	}
	for _, old := range ch.old {
		if err := detach(fd, old); err != nil {
			ch.Revert()
			return nil, fmt.Errorf("detach the old device program of cgroup %s: %w", dir, err)
		}
	}
	ok = true
	return ch, nil
}

func attach(cgroup int, p *ebpf.Program) error {
	return link.RawAttachProgram(link.RawAttachProgramOptions{Target: cgroup, Program: p, Attach: ebpf.AttachCGroupDevice, Flags: bpfFAllowMulti})
}

func detach(cgroup int, p *ebpf.Program) error {
	return link.RawDetachProgram(link.RawDetachProgramOptions{Target: cgroup, Program: p, Attach: ebpf.AttachCGroupDevice})
}

// Revert puts the old programs back and removes the new ones.
func (c *bpfChange) Revert() error {
	var errs []error
	for _, old := range c.old {
		if err := attach(c.cgroup, old); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("reattach device program: %w", err))
		}
	}
	for _, p := range c.new {
		if err := detach(c.cgroup, p); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("detach device filter: %w", err))
		}
	}
	c.close()
	return errors.Join(errs...)
}

// Release keeps the change and releases its descriptors.
func (c *bpfChange) Release() { c.close() }

// close releases the descriptors (attached programs stay attached).
func (c *bpfChange) close() {
	for _, p := range append(c.old, c.new...) {
		p.Close()
	}
	c.old, c.new = nil, nil
	if c.cgroup >= 0 {
		unix.Close(c.cgroup)
		c.cgroup = -1
	}
}

type noChange struct{}

func (noChange) Revert() error { return nil }
func (noChange) Release()      {}
