// Package version holds nctk's version, printed by every tool's --version.
package version

import rdebug "runtime/debug"

// Version is nctk's release version.
const Version = "0.1.0"

// NVIDIACompat is the NVIDIA Container Toolkit release whose interfaces nctk
// implements; tools that print NVIDIA-format versions (nvidia-container-cli
// --version) report it so that scripts checking for a minimum keep working.
const NVIDIACompat = "1.17.8"

// Revision returns the VCS revision the binary was built from ("" if unknown).
func Revision() string {
	bi, ok := rdebug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}

// String is "nctk <version>", with the commit when known.
func String() string {
	s := "nctk " + Version
	if r := Revision(); len(r) >= 12 {
		s += " (commit " + r[:12] + ")"
	}
	return s
}

// hookBuildID is the Go build ID of the nvidia-cdi-hook binary built with
// this one (scripts/build.sh links it in: -X
// github.com/nctk/nctk/internal/version.hookBuildID=ID); empty in a plain
// go build. It is set at link time only.
var hookBuildID string

// HookBuildID is the Go build ID of the nvidia-cdi-hook binary built with
// this one, "" when unknown (see buildid).
func HookBuildID() string { return hookBuildID }
