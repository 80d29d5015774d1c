#!/bin/sh
# build-deb.sh BINDIR OUTDIR: build nctk_<version>_<arch>.deb from the
# binaries in BINDIR (nctk, nvidia-cdi-hook, nctk-driverprobe: `make build`) with dpkg-deb,
# into OUTDIR, and print its path. Run from the repository root (`make deb`).
#
# The package holds what packaging/stage.sh installs (the binaries at
# NVIDIA's paths, config.toml as a conffile, the nvidia-cdi-refresh units
# and udev rule, the docs); it provides,
# conflicts with and replaces NVIDIA's packages. nctk and nvidia-cdi-hook are static;
# nctk-driverprobe (cgo: it loads the driver's libraries) needs libc6.
#
# Environment: DEB_VERSION (default: internal/version.Version), DEB_ARCH
# (default: the Debian name of `go env GOARCH`), GO (default go).
set -eu

bindir=${1:?usage: build-deb.sh BINDIR OUTDIR}
outdir=${2:?usage: build-deb.sh BINDIR OUTDIR}
GO=${GO:-go}
# The packages nctk stands in for (nvidia-docker2 only ships a file nctk
# ships too: /usr/bin/nvidia-docker).
nvidia_pkgs="nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1"

version=${DEB_VERSION:-$(sed -n 's/^const Version = "\(.*\)"$/\1/p' internal/version/version.go)}
compat=$(sed -n 's/^const NVIDIACompat = "\(.*\)"$/\1/p' internal/version/version.go)
[ -n "$version" ] && [ -n "$compat" ] || { echo "build-deb.sh: no version in internal/version/version.go" >&2; exit 1; }
arch=${DEB_ARCH:-}
if [ -z "$arch" ]; then
	case $($GO env GOARCH) in
	amd64) arch=amd64 ;; arm64) arch=arm64 ;; 386) arch=i386 ;; arm) arch=armhf ;;
	ppc64le) arch=ppc64el ;; s390x) arch=s390x ;; riscv64) arch=riscv64 ;;
	*) echo "build-deb.sh: unknown GOARCH; set DEB_ARCH" >&2; exit 1 ;;
	esac
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
packaging/stage.sh "$bindir" "$stage"

install -d "$stage/DEBIAN"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$stage/DEBIAN/"
echo /etc/nvidia-container-runtime/config.toml >"$stage/DEBIAN/conffiles"
(cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"

list() { # list SUFFIX PKG...: "PKG1SUFFIX, PKG2SUFFIX"
	suffix=$1; shift; out=
	for p in "$@"; do out="${out:+$out, }$p$suffix"; done
	echo "$out"
}
# shellcheck disable=SC2086
provides=$(list " (= $compat)" $nvidia_pkgs)
# shellcheck disable=SC2086
conflicts=$(list "" $nvidia_pkgs nvidia-docker2)
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<CONTROL
Package: nctk
Version: $version
Architecture: $arch
Maintainer: nctk developers <nctk@users.noreply.github.com>
Installed-Size: $size
Section: utils
Priority: optional
Homepage: https://github.com/nctk/nctk
Depends: libc6
Provides: $provides
Conflicts: $conflicts
Replaces: $conflicts
Description: NVIDIA Container Toolkit replacement in Go (GPU containers)
 nctk is a drop-in reimplementation of the NVIDIA Container Toolkit: one
 static binary installed under NVIDIA's tool names (nvidia-container-runtime,
 nvidia-container-runtime-hook, nvidia-container-cli, nvidia-ctk,
 nvidia-cdi-hook, nvidia-docker) that reads the same config.toml, plus the
 nvidia-cdi-refresh units that keep /var/run/cdi/nvidia.yaml current.
 .
 It provides, conflicts with and replaces NVIDIA's packages, so installing
 it switches a host to nctk and installing NVIDIA's switches back.
CONTROL

mkdir -p "$outdir"
deb="$outdir/nctk_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
