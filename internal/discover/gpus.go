package discover

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/nctk/nctk/internal/devnum"
	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/procfs"
)

// gpus enumerates /proc/driver/nvidia/gpus/*/information, orders the GPUs
// by PCI bus id (NVML's enumeration order), and finds each GPU's device
// node and MIG state.
func (x *discoverer) gpus() error {
	dir := x.procPath(procfs.GPUsDir)
	ents, err := x.procLoc(procfs.GPUsDir).readDir()
	if err != nil {
		if isNotExist(err) {
			x.warn("no GPUs: %s does not exist", dir)
			return nil
		}
		return fmt.Errorf("list GPUs: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	infos, err := x.gpuInfos(names)
	if err != nil {
		return err
	}
	var gpus []GPU
	for _, name := range names {
		gi, ok := infos[name]
		if !ok {
			x.warn("GPU %s: no information file %s", name, path.Join(dir, name, procfs.InformationFile))
			continue
		}
		if gi.Excluded {
			x.warn("GPU %s is excluded by the driver (NVreg_ExcludedGpus); skipping it", gi.BusID)
			continue
		}
		gpus = append(gpus, GPU{
			Minor:      gi.Minor,
			UUID:       gi.UUID,
			BusID:      gi.BusID,
			Model:      gi.Model,
			ProcDir:    path.Join(procfs.GPUsDir, name),
			MIGCapsDir: fmt.Sprintf("%s/gpu%d", procfs.CapabilitiesDir, gi.Minor),
		})
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return strings.Compare(a.BusID, b.BusID) })
	for i := range gpus {
		g := &gpus[i]
		g.Index = i
		if i > 0 && gpus[i-1].Minor == g.Minor {
			return fmt.Errorf("GPUs %s and %s both claim device minor %d in %s", gpus[i-1].BusID, g.BusID, g.Minor, dir)
		}
		p := fmt.Sprintf("/dev/nvidia%d", g.Minor)
		node, ok, err := x.node(p, devnum.MajorNVIDIA, int64(g.Minor))
		if err != nil {
			return err
		}
		if !ok {
			x.warn("missing device %s (GPU %d, %s)", p, g.Index, g.BusID)
		} else {
			g.Node = node
		}
	}
	x.d.GPUs = gpus
	return x.mig()
}

// mig finds the nvidia-caps nodes, the MIG configuration/monitor
// capabilities and each GPU's MIG state and instances.
func (x *discoverer) mig() error {
	capsMajor, haveCapsMajor := x.major(procfs.DevNVIDIACaps)
	byMinor := map[uint32]DeviceNode{}
	ents, err := x.dev.loc("/dev/nvidia-caps").readDir()
	if err != nil && !isNotExist(err) {
		return fmt.Errorf("list nvidia-caps nodes: %w", err)
	}
	for _, e := range ents {
		if _, ok := strings.CutPrefix(e.Name(), "nvidia-cap"); !ok {
			continue
		}
		p := "/dev/nvidia-caps/" + e.Name()
		want := int64(-1)
		if haveCapsMajor {
			want = int64(capsMajor)
		}
		node, ok, err := x.node(p, want, -1)
		if err != nil {
			x.warn("ignoring %v", err)
			continue
		}
		if ok {
			byMinor[node.Minor] = node
			x.d.CapsNodes = append(x.d.CapsNodes, node)
		}
	}
	slices.SortFunc(x.d.CapsNodes, func(a, b DeviceNode) int { return int(a.Minor) - int(b.Minor) })

	// Names of the existing nodes' capabilities, from mig-minors (a
	// 4,322-line table on real hosts, scanned without building it).
	var minors map[string]uint32
	if len(byMinor) > 0 {
		minors, err = x.migMinorsOf(byMinor)
		if err != nil && !isNotExist(err) {
			x.warn("cannot read MIG capability minors: %v", err)
		}
	}
	if m, ok := minors[procfs.MIGConfig]; ok {
		x.d.MIGConfig = byMinor[m]
	}
	if m, ok := minors[procfs.MIGMonitor]; ok {
		x.d.MIGMonitor = byMinor[m]
	}

	// Minors of each GPU's capabilities, from mig-minors.
	perGPU := map[int][]uint32{}
	for name, m := range minors {
		rest, ok := strings.CutPrefix(name, "gpu")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, "/")
		if n, err := strconv.Atoi(num); err == nil {
			perGPU[n] = append(perGPU[n], m)
		}
	}

	for i := range x.d.GPUs {
		g := &x.d.GPUs[i]
		ms := perGPU[g.Minor]
		slices.Sort(ms)
		for _, m := range ms {
			if n, ok := byMinor[m]; ok {
				g.MIGCapNodes = append(g.MIGCapNodes, n)
			}
		}
		if err := x.migDevices(g, minors, byMinor, haveCapsMajor); err != nil {
			return err
		}
	}
	return nil
}

// migDevices reads /proc/driver/nvidia/capabilities/gpu<minor>/mig: its
// presence means the GPU is MIG-capable, gi<N>/ci<M> directories are the
// GPU and compute instances (MIG devices) that exist, which means MIG mode
// is enabled.
func (x *discoverer) migDevices(g *GPU, minors map[string]uint32, byMinor map[uint32]DeviceNode, devStyle bool) error {
	migDir := g.MIGCapsDir + "/mig"
	ents, err := x.procLoc(migDir).readDir()
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("GPU %d: list MIG capabilities: %w", g.Index, err)
	}
	g.MIGCapable = true
	for _, gi := range ents {
		giID, ok := numSuffix(gi.Name(), "gi")
		if !ok || !gi.IsDir() {
			continue
		}
		giDir := path.Join(migDir, gi.Name())
		cis, err := x.procLoc(giDir).readDir()
		if err != nil {
			return fmt.Errorf("GPU %d: list MIG GPU instance %d: %w", g.Index, giID, err)
		}
		for _, ci := range cis {
			ciID, ok := numSuffix(ci.Name(), "ci")
			if !ok || !ci.IsDir() {
				continue
			}
			m := MIGDevice{
				GI:           giID,
				CI:           ciID,
				GIAccessProc: path.Join(giDir, "access"),
				CIAccessProc: path.Join(giDir, ci.Name(), "access"),
			}
			m.GIAccess = x.capNode(m.GIAccessProc, minors, procfs.MIGGIKey(g.Minor, giID), byMinor, devStyle)
			m.CIAccess = x.capNode(m.CIAccessProc, minors, procfs.MIGCIKey(g.Minor, giID, ciID), byMinor, devStyle)
			g.MIGDevices = append(g.MIGDevices, m)
		}
	}
	slices.SortFunc(g.MIGDevices, func(a, b MIGDevice) int {
		if a.GI != b.GI {
			return a.GI - b.GI
		}
		return a.CI - b.CI
	})
	for i := range g.MIGDevices {
		g.MIGDevices[i].Index = i
	}
	g.MIGEnabled = len(g.MIGDevices) > 0
	return nil
}

// capNode returns the /dev/nvidia-caps node of a capability access file:
// the minor comes from the file itself (DeviceFileMinor), else from
// mig-minors. It is zero when the driver has no nvidia-caps device
// ("proc style" capabilities) or the node does not exist.
func (x *discoverer) capNode(procFile string, minors map[string]uint32, key string, byMinor map[uint32]DeviceNode, devStyle bool) DeviceNode {
	if !devStyle {
		return DeviceNode{}
	}
	m, err := readProc(x.procLoc(procFile), procfs.ParseCapAccess)
	if err != nil {
		var ok bool
		if m, ok = minors[key]; !ok {
			x.warn("MIG capability %s: %v", procFile, err)
			return DeviceNode{}
		}
	}
	n, ok := byMinor[m]
	if !ok {
		x.warn("missing device /dev/nvidia-caps/nvidia-cap%d (MIG capability %s)", m, procFile)
	}
	return n
}

// numSuffix parses names like "gi3" → 3.
func numSuffix(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// imexChannels lists /dev/nvidia-caps-imex-channels/channel<N>.
func (x *discoverer) imexChannels() error {
	dir := "/dev/nvidia-caps-imex-channels"
	ents, err := x.dev.loc(dir).readDir()
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("list IMEX channels: %w", err)
	}
	want := int64(-1)
	if m, ok := x.major(procfs.DevNVIDIACapsIMEX); ok {
		want = int64(m)
	}
	for _, e := range ents {
		n, ok := numSuffix(e.Name(), "channel")
		if !ok {
			continue
		}
		node, ok, err := x.node(dir+"/"+e.Name(), want, int64(n))
		if err != nil {
			x.warn("ignoring %v", err)
			continue
		}
		if ok {
			x.d.IMEXChannels = append(x.d.IMEXChannels, node)
		}
	}
	slices.SortFunc(x.d.IMEXChannels, func(a, b DeviceNode) int { return int(a.Minor) - int(b.Minor) })
	return nil
}

// gpuInfos returns what the information file of each GPU directory in
// names says, by name (a GPU whose file is missing has none). Each file
// costs 0.2–0.7 ms on an H100 host (the driver asks the GPU), per GPU and per
// create: they come from the run cache (procCache) when it holds all of
// them, and are kept there when all were read.
func (x *discoverer) gpuInfos(names []string) (map[string]procfs.GPUInfo, error) {
	files := make([]string, len(names))
	for i, name := range names {
		files[i] = path.Join(procfs.GPUsDir, name, procfs.InformationFile)
	}
	cache, key := x.procCache(gpuInfoKind, files, "")
	var infos map[string]procfs.GPUInfo
	if cache != nil && cache.Load(gpuInfoKind, key, &infos) && len(infos) == len(names) {
		return infos, nil
	}
	infos = make(map[string]procfs.GPUInfo, len(names))
	for i, name := range names {
		gi, err := readProc(x.procLoc(files[i]), procfs.ParseGPUInformation)
		if err != nil {
			if isNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("read GPU information: %w", err)
		}
		infos[name] = gi
	}
	if cache != nil && len(infos) == len(names) && len(names) > 0 {
		if err := cache.Store(gpuInfoKind, key, infos); err != nil {
			x.log.Debug("GPU information not cached", "err", err)
		}
	}
	return infos, nil
}

// migMinorsOf returns the mig-minors entries of the capability nodes in
// byMinor. The kernel builds that table (about 100 KiB) again for every
// open, a few milliseconds even for its first lines: the answer is kept
// in the run cache (procCache), keyed also on the minors asked for.
func (x *discoverer) migMinorsOf(byMinor map[uint32]DeviceNode) (map[string]uint32, error) {
	minors := slices.Sorted(maps.Keys(byMinor))
	var asked strings.Builder
	asked.WriteString("minors")
	for _, m := range minors {
		asked.WriteString(" " + strconv.FormatUint(uint64(m), 10))
	}
	dir, key := x.procCache(migMinorsKind, []string{procfs.MIGMinorsPath}, asked.String())
	return loadOrRead(x, dir, migMinorsKind, key, func() (map[string]uint32, error) {
		return readMIGMinorsOf(x.procAt(procfs.MIGMinorsPath), func(m uint32) bool { _, ok := byMinor[m]; return ok }, len(byMinor))
	})
}

// maxMIGMinorsBytes bounds how much of the mig-minors file is read (about
// 100 KiB on real hosts).
const maxMIGMinorsBytes = hostfile.MaxProc

// readMIGMinorsOf reads /proc/driver/nvidia-caps/mig-minors and returns the
// "<name> <minor>" entries whose minor keep accepts, stopping once want
// distinct minors are found (see scanMIGMinors).
func readMIGMinorsOf(p string, keep func(uint32) bool, want int) (map[string]uint32, error) {
	f, err := hostfile.Open(p, maxMIGMinorsBytes)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := scanMIGMinors(io.LimitReader(f, maxMIGMinorsBytes), keep, want)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return out, nil
}

// scanMIGMinors picks the entries of a mig-minors table whose minor keep
// accepts, allocating only for those, and stops reading once it has found
// want distinct minors (want <= 0: it reads to the end). The table lists
// minors in increasing order from "config 1" and "monitor 2", so a host
// with only the MIG config/monitor nodes reads its first line or two, not
// all 4,322. Lines that are not "<name> <minor>" are skipped
// (procfs.ParseMIGMinors is the validating parser; for valid input both
// agree, which FuzzScanMIGMinors checks).
func scanMIGMinors(r io.Reader, keep func(uint32) bool, want int) (map[string]uint32, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), 64<<10)
	out := map[string]uint32{}
	found := map[uint32]bool{}
	for (want <= 0 || len(found) < want) && sc.Scan() {
		f1, f2, ok := twoFields(sc.Bytes())
		if !ok || len(f2) == 0 {
			continue
		}
		var m uint32
		valid := true
		for _, c := range f2 {
			if c < '0' || c > '9' || m > 1<<20 {
				valid = false
				break
			}
			m = m*10 + uint32(c-'0')
		}
		if !valid || m > 1<<20-1 || !keep(m) {
			continue
		}
		found[m] = true
		if _, dup := out[string(f1)]; !dup {
			out[string(f1)] = m
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// twoFields splits a line into exactly two blank-separated fields.
func twoFields(line []byte) (a, b []byte, ok bool) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	isBlank := func(c byte) bool { return c == ' ' || c == '\t' }
	var fields [2][]byte
	n := 0
	for i := 0; i < len(line); {
		for i < len(line) && isBlank(line[i]) {
			i++
		}
		if i == len(line) {
			break
		}
		j := i
		for j < len(line) && !isBlank(line[j]) {
			j++
		}
		if n == 2 {
			return nil, nil, false
		}
		fields[n] = line[i:j]
		n++
		i = j
	}
	return fields[0], fields[1], n == 2
}
