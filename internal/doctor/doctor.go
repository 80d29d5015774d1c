// Package doctor says why a GPU container does not work on this host, and
// how to fix it: `nvidia-ctk doctor`.
//
// It checks the chain a GPU container depends on, link by link: the kernel
// driver and its user-space libraries, the device nodes and their
// /dev/char links, config.toml, the CDI specs, the container engines found
// on the host, optionally one container (an OCI bundle, or an image known
// to docker, podman or containerd), and the host's posture (cgroups,
// SELinux, rootless). Each problem is a Finding that names what is wrong,
// the error users meet because of it ("CUDA error 35", "Failed to
// initialize NVML: Unknown Error", …), the command that fixes it and the
// values involved.
//
// Every check is a function over the host state (hostState), registered by
// one line in registry; the checks of one group live in one file
// (driver.go, devices.go, config.go, cdi.go, engines.go, container.go and
// cuda.go for the container, posture.go); fatbin.go reads the GPU code
// headers of CUDA binaries. The container checks see the container's files
// through one interface (containerFiles, files.go), over a bundle's rootfs
// directory or over an image's merged layers (imageindex.go): an image is
// streamed from its engine's client (`docker image save`, `podman image
// save`, `ctr images export`, imagesource.go) and read in process
// (imagearchive.go: docker-save and OCI layouts, whiteouts applied, every
// size and count bounded), keeping only the content of the files the
// checks read. The checks reuse the project's own readers (discover,
// procfs, devnodes, config, cdispec, request, requirements, ldcache) and
// only read: nothing on the host or in an engine is changed (the image
// archive is spooled to an unlinked temporary file), no daemon is
// contacted except through an engine's client for --image, and no GPU is
// needed (the driver's libcuda is loaded in a child process, as the
// runtime does, only when a container's requirements or CUDA runtime need
// the CUDA version, or its GPU code the GPUs' compute capability).
//
// Options.HostRoot points every fixed host location (/proc, /sys, /dev,
// /etc, /run, /usr/bin) at another directory, which is how the tests run
// the checks over fixture hosts.
package doctor

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/nctk/nctk/internal/driverprobe"
)

// Severity ranks a finding.
type Severity int

// The severities, mildest first.
const (
	// OK: the link checked is fine (or a fact worth knowing).
	OK Severity = iota
	// Warning: works now, but breaks some uses or breaks later.
	Warning
	// Error: a GPU container will not start or will not work.
	Error
)

func (s Severity) String() string {
	switch s {
	case OK:
		return "ok"
	case Warning:
		return "warning"
	case Error:
		return "error"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// MarshalText writes the severity's name ("ok", "warning", "error").
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a severity's name.
func (s *Severity) UnmarshalText(b []byte) error {
	for _, v := range []Severity{OK, Warning, Error} {
		if v.String() == string(b) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("unknown severity %q (want ok, warning or error)", b)
}

// Finding is the result of one check.
type Finding struct {
	Severity Severity `json:"severity"`
	// Check is the check's id ("driver.module", "devices.char-links").
	Check string `json:"check"`
	// Problem says what is wrong (for OK findings: what was found).
	Problem string `json:"problem"`
	// Breaks is what goes wrong in containers because of it: the error
	// users see.
	Breaks string `json:"breaks,omitempty"`
	// Fix is the command (or change) that fixes it.
	Fix string `json:"fix,omitempty"`
	// Values are the named values behind the finding (versions, paths,
	// device numbers).
	Values map[string]string `json:"values,omitempty"`
}

// Options say what to check and where.
type Options struct {
	// HostRoot is the directory standing for the host's "/": /proc, /sys,
	// /dev, /etc, /run and the binary directories are read below it. ""
	// means "/".
	HostRoot string
	// DriverRoot is the driver's root (a host path); "" means HostRoot.
	DriverRoot string
	// DevRoot is the root whose /dev holds the device nodes (a host
	// path); "" means DriverRoot.
	DevRoot string
	// SpecDirs are the CDI spec directories (host paths); nil means the
	// config's spec-dirs (default /etc/cdi, /var/run/cdi) below HostRoot.
	SpecDirs []string
	// ConfigFile is config.toml (a host path); "" means the file NVIDIA's
	// tools use (config.Path of Environ) below HostRoot.
	ConfigFile string
	// Environ is the environment config.Path consults.
	Environ []string
	// Bundle is an OCI bundle directory to judge as the runtime would
	// start it; "" checks no container.
	Bundle string
	// Image is an image known to docker, podman or containerd to judge as
	// Bundle judges a bundle (Bundle wins when both are set); "" checks
	// no image. The engines asked are those of Engines among docker,
	// podman and containerd (all three when Engines names none of them),
	// in that order; the first that knows the image streams it
	// (`docker image save`, `podman image save`, `ctr images export`).
	Image string
	// DockerHost is DOCKER_HOST for the docker client that reads Image
	// ("": the environment's, else docker's default socket).
	DockerHost string
	// ContainerdNamespace is the containerd namespace holding Image (""
	// searches k8s.io, default and moby).
	ContainerdNamespace string
	// Engines limits the engine checks to these engines (docker,
	// containerd, crio, podman); nil checks every engine found.
	Engines []string
	// GPUArchs are compute capabilities ("9.0") to check the container's
	// GPU code against instead of the host GPUs' (which only a reachable
	// GPU tells).
	GPUArchs []string
	// Rootless says the user runs rootless containers (nvidia-ctk sets it
	// when run by a user other than root who has a rootless docker socket
	// or podman state in $XDG_RUNTIME_DIR).
	Rootless bool
	// ProbeConfig tunes the driver probe that learns the driver's CUDA
	// version for a container's cuda requirements.
	ProbeConfig driverprobe.Config
	// Logger receives debug records; nil discards them.
	Logger *slog.Logger
}

// Check is one registered check: an id and the function that runs it.
type Check struct {
	// ID names the check ("driver.module"); findings carry it.
	ID string
	// Run returns the check's findings (none when it does not apply).
	Run func(h *hostState) []Finding
}

// registry returns every check, in the order they run. Adding a check is
// adding its function (in its group's file) and one line here.
func registry() []Check {
	return []Check{
		{"driver.module", checkModule},
		{"driver.user-space", checkUserSpace},
		{"driver.libraries", checkLibraries},
		{"driver.persistence", checkPersistence},
		{"driver.excluded-gpus", checkExcludedGPUs},
		{"devices.nodes", checkDeviceNodes},
		{"devices.imex-channels", checkIMEXChannels},
		{"devices.char-links", checkCharLinks},
		{"config.file", checkConfigFile},
		{"config.driver-root", checkConfigRoot},
		{"cdi.specs", checkCDISpecs},
		{"cdi.stale", checkCDIStale},
		{"cdi.duplicates", checkCDIDuplicates},
		{"engine.docker", checkDocker},
		{"engine.docker-cgroup", checkDockerCgroup},
		{"engine.containerd", checkContainerd},
		{"engine.crio", checkCRIO},
		{"engine.podman", checkPodman},
		{"container.request", checkContainerRequest},
		{"container.requirements", checkRequirements},
		{"container.cuda-runtime", checkCUDARuntime},
		{"container.kernel-images", checkKernelImages},
		{"container.driver-libraries", checkImageDriverLibs},
		{"container.libc", checkImageLibc},
		{"container.ld-library-path", checkLDLibraryPath},
		{"host.cgroup", checkCgroup},
		{"host.selinux", checkSELinux},
		{"host.rootless", checkRootless},
	}
}

// Report is the outcome of Run.
type Report struct {
	// Findings are ordered by severity (errors first), then by check
	// order.
	Findings []Finding `json:"findings"`
}

// Run runs every check and returns the findings. It changes nothing on
// the host. An error is returned only for unusable options (a --engine
// name no check knows).
func Run(o Options) (*Report, error) {
	for _, e := range o.Engines {
		if !slices.Contains(engineNames(), e) {
			return nil, fmt.Errorf("unknown engine %q (want %s)", e, strings.Join(engineNames(), ", "))
		}
	}
	h := newHostState(o)
	defer h.close()
	var out []Finding
	for _, c := range registry() {
		for _, f := range c.Run(h) {
			f.Check = c.ID
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b Finding) int { return int(b.Severity) - int(a.Severity) })
	return &Report{Findings: out}, nil
}

// Worst returns the highest severity among the findings (OK for none).
func (r *Report) Worst() Severity {
	w := OK
	for _, f := range r.Findings {
		w = max(w, f.Severity)
	}
	return w
}

// Count returns how many findings have severity s.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// JSON returns the report as indented JSON.
func (r *Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("doctor: encoding the report: %w", err)
	}
	return append(b, '\n'), nil
}

// Text renders the report for people: problems first (what, why, fix,
// values), the passing checks as one short line each, then a summary.
func (r *Report) Text(verbose bool) string {
	var b strings.Builder
	for _, f := range r.Findings {
		if f.Severity == OK {
			if verbose {
				fmt.Fprintf(&b, "ok       %-27s %s\n", f.Check, f.Problem)
			}
			continue
		}
		fmt.Fprintf(&b, "%-8s %-27s %s\n", strings.ToUpper(f.Severity.String()), f.Check, f.Problem)
		if f.Breaks != "" {
			fmt.Fprintf(&b, "         breaks: %s\n", f.Breaks)
		}
		if f.Fix != "" {
			fmt.Fprintf(&b, "         fix:    %s\n", f.Fix)
		}
		if len(f.Values) > 0 {
			keys := make([]string, 0, len(f.Values))
			for k := range f.Values {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = k + "=" + f.Values[k]
			}
			fmt.Fprintf(&b, "         values: %s\n", strings.Join(parts, " "))
		}
	}
	verdict := "GPU containers should work"
	if r.Worst() == Error {
		verdict = "GPU containers will fail"
	}
	fmt.Fprintf(&b, "%d error(s), %d warning(s), %d ok: %s\n", r.Count(Error), r.Count(Warning), r.Count(OK), verdict)
	return b.String()
}

// hostPath returns the host path of an absolute path p below root, with
// the symbolic links on the way resolved inside root (a host tree's
// absolute links, /var/run -> /run, stay in it).
func hostPath(root, p string) string {
	if root == "" || root == "/" {
		return filepath.Clean(p)
	}
	if j, err := securejoin.SecureJoin(root, p); err == nil {
		return j
	}
	return filepath.Join(root, p)
}
