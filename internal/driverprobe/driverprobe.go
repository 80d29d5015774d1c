// Package driverprobe asks the NVIDIA driver's own libraries for the facts
// only the driver knows: the CUDA version it supports (cuDriverGetVersion
// in libcuda, which works without a GPU), each GPU's compute capability
// (cuInit, cuDeviceGetAttribute) and its brand (NVML's nvmlDeviceGetBrand).
//
// Driver libraries are never loaded into the calling process: a crash, a
// hang or a clash with the driver root's own libraries must not take the
// caller down. Probe runs a child with the hidden first argument ChildArg:
// the current binary when it is built with cgo (test binaries), else the
// helper HelperName installed beside it (the static nctk). Every main that
// can be that child calls MaybeRunChild first thing, and so must the
// TestMain of any test binary that probes. The
// child gets the request as JSON on stdin and an empty environment (so
// CUDA_VISIBLE_DEVICES and friends cannot change what it sees), writes the
// result as JSON to file descriptor 3, and is killed after Config.Timeout.
//
// Results are cached on disk, keyed by the identity of the driver files
// (path, size, mtime, inode), the kernel module version and the GPUs' bus
// ids, so the hot container-create path pays the dlopen once per driver
// rather than once per container.
package driverprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nctk/nctk/internal/runcache"
)

// ChildArg is the hidden argv[1] that turns an nctk binary into a probe child.
const ChildArg = "__nctk-driverprobe"

// DefaultTimeout bounds a probe child.
const DefaultTimeout = 5 * time.Second

// Sources of a Result.
const (
	SourceLibcuda = "libcuda" // measured now, by loading the driver's libraries
	SourceCache   = "cache"   // a cached result for the same driver files
)

// Request names the driver files to load. Paths are host paths (the driver
// root already joined).
type Request struct {
	// Libcuda is the driver's libcuda.so (required).
	Libcuda string `json:"libcuda"`
	// NVML is the driver's libnvidia-ml.so; "" skips brand detection.
	NVML string `json:"nvml,omitempty"`
	// BusIDs are the PCI bus ids (00000000:41:00.0) of the GPUs discovered
	// from procfs; brands are asked for these, and they are part of the
	// cache key.
	BusIDs []string `json:"bus_ids,omitempty"`
	// ModuleVersion is the kernel module's version (cache key only).
	ModuleVersion string `json:"module_version,omitempty"`
	// MIGLayout describes the MIG instances procfs shows
	// ("00000000:41:00.0/gi1/ci0", …); cache key only: a result is reused
	// only for the same layout, and never when MIG devices exist (their
	// UUIDs change whenever instances are recreated).
	MIGLayout []string `json:"mig_layout,omitempty"`
}

// Device is what libcuda reports for one CUDA device.
type Device struct {
	// Ordinal is the CUDA device ordinal (with an empty environment:
	// CUDA_DEVICE_ORDER=FASTEST_FIRST, so it is not the NVML index).
	Ordinal int `json:"ordinal"`
	// BusID is the normalised PCI bus id (00000000:41:00.0).
	BusID string `json:"bus_id,omitempty"`
	// Arch is the compute capability "major.minor".
	Arch string `json:"arch,omitempty"`
	// Error says why the device could not be queried.
	Error string `json:"error,omitempty"`
}

// MIGInfo is a GPU's MIG state.
type MIGInfo struct {
	// Enabled is NVML's current MIG mode.
	Enabled bool        `json:"enabled"`
	Devices []MIGDevice `json:"devices,omitempty"`
}

// MIGDevice is one MIG device as NVML names it.
type MIGDevice struct {
	GI   int    `json:"gi"`
	CI   int    `json:"ci"`
	UUID string `json:"uuid"`
}

// Result holds the driver's answers and, for what it could not answer, why.
type Result struct {
	// CUDADriverVersion is cuDriverGetVersion's value (12020 for CUDA
	// 12.2), 0 if unknown; CUDAError says why.
	CUDADriverVersion int    `json:"cuda_driver_version,omitempty"`
	CUDAError         string `json:"cuda_error,omitempty"`
	// Devices lists the CUDA devices; DeviceError says why there are none
	// (e.g. "cuInit: CUDA_ERROR_NO_DEVICE (100)" without a GPU).
	Devices     []Device `json:"devices,omitempty"`
	DeviceError string   `json:"device_error,omitempty"`
	// Brands maps bus ids to NVML brand names; NVMLError says why a brand
	// is missing.
	Brands    map[string]string `json:"brands,omitempty"`
	NVMLError string            `json:"nvml_error,omitempty"`
	// MIG maps bus ids of MIG-capable GPUs to their MIG mode and devices,
	// as NVML reports them (MIG device UUIDs exist nowhere else).
	MIG map[string]MIGInfo `json:"mig,omitempty"`
	// DlopenDuration is how long dlopen of libcuda took in the child and
	// ProbeDuration the child's whole work (both as first measured, also
	// for cached results).
	DlopenDuration time.Duration `json:"dlopen_ns,omitempty"`
	ProbeDuration  time.Duration `json:"probe_ns,omitempty"`

	// Source is SourceLibcuda or SourceCache; CacheNote says why the
	// result was not cached or a cache could not be used ("" when fine).
	Source    string `json:"-"`
	CacheNote string `json:"-"`
}

// CUDAVersion formats CUDADriverVersion as NVIDIA does ("12.2"), "" if unknown.
func (r *Result) CUDAVersion() string { return FormatCUDAVersion(r.CUDADriverVersion) }

// FormatCUDAVersion turns a cuDriverGetVersion value into "major.minor"
// (12020 → "12.2", 13000 → "13.0"); "" for 0 or less.
func FormatCUDAVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

// Arch returns the compute capability libcuda reported for a bus id.
func (r *Result) Arch(busID string) (string, bool) {
	busID = normalizeBusID(busID)
	for _, d := range r.Devices {
		if d.BusID == busID && d.Arch != "" {
			return d.Arch, true
		}
	}
	return "", false
}

// Brand returns the NVML brand for a bus id.
func (r *Result) Brand(busID string) (string, bool) {
	b, ok := r.Brands[normalizeBusID(busID)]
	return b, ok
}

// cacheable says whether a result may be cached, and if not why: only
// when every fact asked for was learnt (a failure may be transient:
// devices not yet created, driver still loading) and no MIG device exists
// (MIG UUIDs change whenever instances are recreated).
func (r *Result) cacheable(req Request) (bool, string) {
	mig := len(req.MIGLayout) > 0
	for _, m := range r.MIG {
		mig = mig || len(m.Devices) > 0
	}
	if mig {
		return false, "not cached: MIG devices exist (their UUIDs change when instances are recreated)"
	}
	complete := r.CUDADriverVersion != 0
	for _, b := range req.BusIDs {
		if _, ok := r.Arch(b); !ok {
			complete = false
		}
		if _, ok := r.Brand(b); req.NVML != "" && !ok {
			complete = false
		}
	}
	if !complete {
		return false, "not cached: the driver did not answer every question"
	}
	return true, ""
}

// Config tunes Probe.
type Config struct {
	// Executable is the binary to run as the child; it must call
	// MaybeRunChild. "" means os.Executable().
	Executable string
	// Timeout bounds the child; 0 means DefaultTimeout.
	Timeout time.Duration
	// CacheDir holds cached results; "" means runcache.DefaultDir(os.Getenv).
	CacheDir string
	// NoCache disables reading and writing the cache.
	NoCache bool
	// Credential, when set, runs the child as that user and group
	// (privilege separation, like NVIDIA's --user for its NVML process).
	Credential *syscall.Credential
}

// OpenCache returns the cache directory of these settings (CacheDir, or
// runcache.DefaultDir when it is ""), checked by runcache.Open: nil and
// why when it cannot be used, nil and "" with NoCache. The probe keeps its
// results there, discovery the MIG capability minors.
func (c Config) OpenCache() (*runcache.Dir, string) {
	if c.NoCache {
		return nil, ""
	}
	dir := c.CacheDir
	if dir == "" {
		dir = runcache.DefaultDir(os.Getenv)
	}
	return runcache.Open(dir)
}

// Probe returns the driver's answers for req, from the cache when the same
// driver files were probed before, else from a child process. The error
// is non-nil only when no child could be run or it failed (crash,
// timeout, garbage output); what the driver could not answer is reported
// inside the Result.
func Probe(ctx context.Context, req Request, cfg Config) (*Result, error) {
	if req.Libcuda == "" {
		return nil, errors.New("driver probe: no libcuda path given")
	}
	bus := make([]string, len(req.BusIDs))
	for i, b := range req.BusIDs {
		bus[i] = normalizeBusID(b)
	}
	req.BusIDs = bus
	c, note := openCache(cfg, req)
	if c != nil {
		if res, ok := c.load(); ok {
			res.Source = SourceCache
			return res, nil
		}
	}
	res, err := runChild(ctx, req, cfg)
	if err != nil {
		return nil, err
	}
	res.Source = SourceLibcuda
	res.CacheNote = note
	if c != nil {
		if ok, why := res.cacheable(req); !ok {
			res.CacheNote = why
		} else if err := c.store(res); err != nil {
			res.CacheNote = "not cached: " + err.Error()
		}
	}
	return res, nil
}

// maxChildOutput bounds what is read from the child.
const maxChildOutput = 1 << 20

// HelperName is the probe helper installed beside nctk: a small program
// built with cgo that only runs the probe child. The nctk binary itself is
// built without cgo (static, so every container create starts it faster)
// and runs the helper; a binary built with cgo re-executes itself.
const HelperName = "nctk-driverprobe"

// childExecutable is the program Probe runs as the child: cfg.Executable,
// else this binary when it was built with cgo, else HelperName in this
// binary's directory (never one found through $PATH).
func childExecutable(cfg Config) (string, error) {
	if cfg.Executable != "" {
		return cfg.Executable, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("driver probe: find own executable: %w", err)
	}
	if haveCgo {
		return self, nil
	}
	helper := filepath.Join(filepath.Dir(self), HelperName)
	if _, err := os.Stat(helper); err != nil {
		return "", fmt.Errorf("driver probe: %s is built without cgo and loads driver libraries through %s, which is missing (install it beside %s): %w",
			filepath.Base(self), HelperName, self, err)
	}
	return helper, nil
}

func runChild(ctx context.Context, req Request, cfg Config) (*Result, error) {
	exe, err := childExecutable(cfg)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	in, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("driver probe: encode request: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("driver probe: result pipe: %w", err)
	}
	defer pr.Close()
	cmd := exec.CommandContext(ctx, exe, ChildArg)
	cmd.Env = []string{} // nothing from the caller may steer libcuda
	cmd.Stdin = bytes.NewReader(in)
	var stderr limitedBuffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	cmd.ExtraFiles = []*os.File{pw}
	cmd.WaitDelay = time.Second
	if cfg.Credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cfg.Credential}
	}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("driver probe: start %s: %w", exe, err)
	}
	pw.Close()
	out, readErr := io.ReadAll(io.LimitReader(pr, maxChildOutput))
	waitErr := cmd.Wait()
	what := fmt.Sprintf("driver probe of %s", req.Libcuda)
	if ctx.Err() == context.DeadlineExceeded {
		return nil, fmt.Errorf("%s: timed out after %s (the driver hung; is the GPU healthy? is nvidia-persistenced running?)", what, timeout)
	}
	if waitErr != nil {
		return nil, fmt.Errorf("%s: child process failed: %w%s", what, waitErr, stderr.suffix())
	}
	if readErr != nil {
		return nil, fmt.Errorf("%s: read result: %w", what, readErr)
	}
	var res Result
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("%s: bad result from child (%w)%s", what, err, stderr.suffix())
	}
	return &res, nil
}

// MaybeRunChild runs the probe child and exits if args[1] is ChildArg;
// otherwise it returns false at once. Call it first thing in main (and in
// TestMain of tests that probe).
func MaybeRunChild(args []string) (handled bool) {
	if len(args) < 2 || args[1] != ChildArg {
		return false
	}
	os.Exit(childMain(os.Stdin, os.NewFile(3, "result")))
	return true
}

func childMain(stdin io.Reader, out *os.File) int {
	if out == nil {
		fmt.Fprintln(os.Stderr, "driver probe child: no result descriptor (fd 3)")
		return 2
	}
	defer out.Close()
	var req Request
	if err := json.NewDecoder(io.LimitReader(stdin, maxChildOutput)).Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "driver probe child: bad request: %v\n", err)
		return 2
	}
	res := runProbe(req)
	if err := json.NewEncoder(out).Encode(&res); err != nil {
		fmt.Fprintf(os.Stderr, "driver probe child: write result: %v\n", err)
		return 2
	}
	return 0
}

// BrandName maps NVML's nvmlBrandType_t to the names NVIDIA's CLI prints.
func BrandName(b int) string {
	names := []string{"Unknown", "Quadro", "Tesla", "NVS", "GRID", "GeForce", "TITAN", "VApps", "VPC", "VCS",
		"VWS", "CloudGaming", "QuadroRTX", "NvidiaRTX", "Nvidia", "GeForceRTX", "TitanRTX"}
	if b < 0 || b >= len(names) {
		return "Unknown"
	}
	return names[b]
}

// normalizeBusID turns "0000:41:00.0" or "41:00.0" into NVIDIA's
// "00000000:41:00.0" (lower case); other strings are returned lower-cased.
func normalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	var dom, bus, dev, fn uint64
	if n, err := fmt.Sscanf(s, "%x:%x:%x.%x", &dom, &bus, &dev, &fn); err == nil && n == 4 {
		return fmt.Sprintf("%08x:%02x:%02x.%x", dom, bus, dev, fn)
	}
	if n, err := fmt.Sscanf(s, "%x:%x.%x", &bus, &dev, &fn); err == nil && n == 3 {
		return fmt.Sprintf("%08x:%02x:%02x.%x", 0, bus, dev, fn)
	}
	return s
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := 4096 - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// suffix returns the first lines of what was written (a Go crash dump's
// first line names the signal), for an error message.
func (b *limitedBuffer) suffix() string {
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
		if len(lines) == 3 {
			break
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "; stderr: " + strings.Join(lines, "; ")
}
