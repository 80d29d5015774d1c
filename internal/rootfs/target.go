package rootfs

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Target is where injected files land in a container image: the
// directories its own dynamic loader and PATH use.
type Target struct {
	// LibDir receives the 64-bit (native) driver libraries.
	LibDir string
	// Lib32Dir receives the 32-bit libraries (compat32); "" when the
	// architecture has none.
	Lib32Dir string
	// BinDir receives the driver binaries.
	BinDir string
	// Multiarch reports a Debian-style multiarch layout.
	Multiarch bool
}

// multiarch holds the Debian multiarch triplets of an architecture.
type multiarch struct{ native, compat32 string }

// archTriplets returns the multiarch triplets for a GOARCH.
func archTriplets(goarch string) multiarch {
	switch goarch {
	case "amd64":
		return multiarch{"x86_64-linux-gnu", "i386-linux-gnu"}
	case "arm64":
		return multiarch{"aarch64-linux-gnu", ""}
	case "ppc64le":
		return multiarch{"powerpc64le-linux-gnu", ""}
	case "386":
		return multiarch{"i386-linux-gnu", ""}
	}
	return multiarch{}
}

// Target detects the image's library layout, as NVIDIA's
// libnvidia-container does, with every lookup resolved inside the root:
//
//   - /etc/debian_version exists → /usr/lib/<triplet> (and
//     /usr/lib/i386-linux-gnu on x86_64);
//   - otherwise, if the image already has a multiarch library directory
//     (/usr/lib/<triplet> or /lib/<triplet>; busybox+glibc images copied
//     from Debian are like this), the same multiarch layout, because that
//     is where its loader searches without a cache;
//   - otherwise /usr/lib64, and for 32-bit /usr/lib32 if it exists, else
//     /usr/lib unless that is the same directory as /usr/lib64.
//
// Binaries always go to /usr/bin.
func (r *Root) Target() Target {
	return r.targetFor(runtime.GOARCH)
}

func (r *Root) targetFor(goarch string) Target {
	t := Target{BinDir: "/usr/bin"}
	ma := archTriplets(goarch)
	if ma.native != "" && (r.Exists("/etc/debian_version") || r.isDir("/usr/lib/"+ma.native) || r.isDir("/lib/"+ma.native)) {
		t.Multiarch = true
		t.LibDir = "/usr/lib/" + ma.native
		if ma.compat32 != "" {
			t.Lib32Dir = "/usr/lib/" + ma.compat32
		}
		return t
	}
	t.LibDir = "/usr/lib64"
	if goarch != "amd64" && goarch != "386" {
		return t // no 32-bit compat libraries outside x86
	}
	switch {
	case r.isDir("/usr/lib32"):
		t.Lib32Dir = "/usr/lib32"
	case !r.sameFile("/usr/lib", "/usr/lib64"):
		t.Lib32Dir = "/usr/lib"
	}
	return t
}

func (r *Root) isDir(p string) bool {
	st, err := r.Stat(p)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// sameFile reports whether a and b resolve inside the root to one
// existing file (a directory, for Target's /usr/lib and /usr/lib64).
func (r *Root) sameFile(a, b string) bool {
	sa, err := r.Stat(a)
	if err != nil {
		return false
	}
	sb, err := r.Stat(b)
	return err == nil && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
