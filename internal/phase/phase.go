// Package phase names the step a GPU request failed in, as
// nvidia-container-cli words its errors: "<phase> error: <message>". Errors
// are wrapped in an *Error where the step is known (parsing the request,
// discovery, device selection and the requirement check while planning;
// the container lookup, mounts and ld.so.cache update while
// internal/configure applies the plan); callers branch on the phase with
// errors.As, and the tools print Error's text as it is.
package phase

// Phase is the step that failed, in NVIDIA's words.
type Phase string

// The phases of computing a container's GPU injection.
const (
	// Input: the request itself is invalid (a malformed variable or
	// option).
	Input Phase = "input"
	// Initialization: no usable driver (nvidia-container-cli's word for a
	// missing or mismatched driver).
	Initialization Phase = "initialization"
	// Detection: driver discovery failed.
	Detection Phase = "detection"
	// Device: a requested device does not exist or cannot be injected.
	Device Phase = "device"
	// Requirement: an NVIDIA_REQUIRE_* / --require expression is
	// malformed or does not hold.
	Requirement Phase = "requirement"
	// MIGConfig and MIGMonitor: a MIG configuration or monitoring request
	// that cannot be honoured.
	MIGConfig  Phase = "mig-config"
	MIGMonitor Phase = "mig-monitor"
)

// The phases of applying a plan to a created container (internal/configure;
// an invalid plan, container or option there is Input).
const (
	// Container: the container's namespaces, procfs or device cgroup
	// cannot be found or entered.
	Container Phase = "container"
	// Mount: a driver file or device node cannot be checked or mounted,
	// a symlink cannot be created, or the device cgroup rules cannot be
	// added.
	Mount Phase = "mount"
	// Ldcache: the container's ld.so.cache cannot be updated.
	Ldcache Phase = "ldcache"
)

// Error is an error with the phase it happened in.
type Error struct {
	Phase Phase
	Err   error
}

// Error is NVIDIA's wording, "<phase> error: <message>".
func (e *Error) Error() string { return string(e.Phase) + " error: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *Error) Unwrap() error { return e.Err }
