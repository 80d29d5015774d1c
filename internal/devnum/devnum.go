// Package devnum holds the character device numbers the NVIDIA kernel
// driver fixes: the major of the GPU and driver-wide nodes and the minors
// of the driver-wide nodes. The other majors (nvidia-uvm, nvidia-caps,
// nvidia-caps-imex-channels) are assigned when the modules load and are
// read from /proc/devices; GPU minors come from
// /proc/driver/nvidia/gpus/*/information.
//
// It is a leaf package so that discovery, node creation and the test
// fixtures (which discovery's tests import) share one definition.
package devnum

const (
	// MajorNVIDIA is the major of /dev/nvidiactl, /dev/nvidia-modeset and
	// /dev/nvidia<minor> ("nvidia", on older drivers "nvidia-frontend", in
	// /proc/devices).
	MajorNVIDIA = 195
	// MinorCtl is /dev/nvidiactl's minor on MajorNVIDIA.
	MinorCtl = 255
	// MinorModeset is /dev/nvidia-modeset's minor on MajorNVIDIA.
	MinorModeset = 254
	// MaxGPUMinor is the largest minor of a GPU node /dev/nvidia<minor>:
	// the minors above it are the driver-wide nodes'.
	MaxGPUMinor = MinorModeset - 1
	// MinorUVM is /dev/nvidia-uvm's minor on the nvidia-uvm major.
	MinorUVM = 0
	// MinorUVMTools is /dev/nvidia-uvm-tools's minor on the nvidia-uvm
	// major.
	MinorUVMTools = 1
)
