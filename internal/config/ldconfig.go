package config

import (
	"fmt"
	"os"
	"path"
	"strings"
)

// DefaultLdconfig is the host ldconfig run when none is configured
// (nvidia-container-cli.ldconfig empty, no --ldconfig or --ldconfig-path).
const DefaultLdconfig = "/sbin/ldconfig"

// Ldconfig is an ldconfig setting read: nvidia-container-cli.ldconfig, and
// nvidia-container-cli's --ldconfig, which take the same syntax:
// "@/sbin/ldconfig" names a binary on the host, "/sbin/ldconfig" (no "@")
// one inside the container. The zero Ldconfig is "not set", which means
// DefaultLdconfig on the host.
type Ldconfig struct {
	// Path is the binary's absolute path, without the "@"; "" when not
	// set.
	Path string
	// Host: Path is a host path (written with "@"); otherwise it is a path
	// inside the container.
	Host bool
}

// LdconfigError is an ldconfig setting that cannot be used: a path that is
// not absolute, or a container path where a host binary is needed.
type LdconfigError struct {
	// Value is the setting as written.
	Value string
	// InContainer: Value names a binary inside the container (no "@");
	// otherwise its path is not absolute.
	InContainer bool
}

func (e *LdconfigError) Error() string {
	if e.InContainer {
		return fmt.Sprintf("%q is a container path (no \"@\")", e.Value)
	}
	return fmt.Sprintf("%q is not an absolute path", e.Value)
}

// ParseLdconfig reads an ldconfig setting: "" is the zero Ldconfig,
// "@/abs/path" a host path, "/abs/path" a container path. A path that is
// not absolute is an *LdconfigError.
func ParseLdconfig(s string) (Ldconfig, error) {
	if s == "" {
		return Ldconfig{}, nil
	}
	p, host := strings.CutPrefix(s, "@")
	if !path.IsAbs(p) {
		return Ldconfig{}, &LdconfigError{Value: s}
	}
	return Ldconfig{Path: p, Host: host}, nil
}

// ParseHostLdconfig reads a host path given without "@" (nvidia-cdi-hook's
// and nvidia-ctk's --ldconfig-path): "" is the zero Ldconfig, a path that
// is not absolute an *LdconfigError.
func ParseHostLdconfig(p string) (Ldconfig, error) {
	if p == "" {
		return Ldconfig{}, nil
	}
	if !path.IsAbs(p) {
		return Ldconfig{}, &LdconfigError{Value: p}
	}
	return Ldconfig{Path: p, Host: true}, nil
}

// String returns the setting as written: "@" and the path for a host path,
// the path for a container path, "" for the zero Ldconfig.
func (l Ldconfig) String() string {
	if l.Host && l.Path != "" {
		return "@" + l.Path
	}
	return l.Path
}

// InContainer reports whether l names a binary inside the container.
func (l Ldconfig) InContainer() bool { return l.Path != "" && !l.Host }

// Normalize returns l with the host binary's ".real" variant chosen as
// NVIDIA's tools choose it (Ubuntu's /sbin/ldconfig is a shell wrapper
// around /sbin/ldconfig.real): for a host path X or X.real, X.real when
// that is a regular file, else X. A container path and the zero Ldconfig
// are returned as they are.
func (l Ldconfig) Normalize() Ldconfig {
	if !l.Host || l.Path == "" {
		return l
	}
	base := strings.TrimSuffix(l.Path, ".real")
	if st, err := os.Stat(base + ".real"); err == nil && st.Mode().IsRegular() {
		return Ldconfig{Path: base + ".real", Host: true}
	}
	return Ldconfig{Path: base, Host: true}
}

// HostPath returns the host binary to run for l: its path normalized (see
// Normalize), DefaultLdconfig normalized for the zero Ldconfig. A container
// path is an *LdconfigError: nctk never runs a binary from the container
// (CVE-2024-0136/0137).
func (l Ldconfig) HostPath() (string, error) {
	if l.InContainer() {
		return "", &LdconfigError{Value: l.String(), InContainer: true}
	}
	if l.Path == "" {
		l = Ldconfig{Path: DefaultLdconfig, Host: true}
	}
	return l.Normalize().Path, nil
}

// LdconfigSetting returns nvidia-container-cli.ldconfig read (see
// ParseLdconfig). A container path is refused (an *LdconfigError in the
// chain, with what to do) unless features.allow-ldconfig-from-container is
// on.
func (c *Config) LdconfigSetting() (Ldconfig, error) {
	l, err := ParseLdconfig(c.CLI.Ldconfig)
	if err != nil {
		return Ldconfig{}, fmt.Errorf("nvidia-container-cli.ldconfig = %w: write a host path starting with @ (such as @/sbin/ldconfig)", err)
	}
	if l.InContainer() && !c.Features.AllowLdconfigFromContainer {
		return Ldconfig{}, fmt.Errorf("nvidia-container-cli.ldconfig = %w, refused unless features.allow-ldconfig-from-container = true: write a host path starting with @ (such as @/sbin/ldconfig)",
			&LdconfigError{Value: c.CLI.Ldconfig, InContainer: true})
	}
	return l, nil
}

// HostLdconfig returns the host ldconfig nctk's own tools use under this
// configuration: nvidia-container-cli.ldconfig when it is a host path (not
// normalized: see Ldconfig.HostPath), and the zero Ldconfig (the default)
// when it is empty or a container path that
// features.allow-ldconfig-from-container accepts, since nctk never runs a
// binary from the container. Errors are LdconfigSetting's.
func (c *Config) HostLdconfig() (Ldconfig, error) {
	l, err := c.LdconfigSetting()
	if err != nil || l.InContainer() {
		return Ldconfig{}, err
	}
	return l, nil
}
