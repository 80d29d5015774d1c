#!/bin/sh
# build-rpm.sh BINDIR OUTDIR: build nctk-<version>-<release>.<arch>.rpm from
# the binaries in BINDIR (nctk, nvidia-cdi-hook, nctk-driverprobe: `make build`) with
# rpmbuild (Debian: `apt-get install rpm`), into OUTDIR, and print its path.
# Run from the repository root (`make rpm`).
#
# The package holds what packaging/stage.sh installs, the same files as the
# .deb, with config.toml as %config(noreplace); packaging/rpm/nctk.spec
# declares what it provides, conflicts with and obsoletes (NVIDIA's
# packages). The payload is gzip-compressed: every rpm reads it, and it is
# built in a fifth of xz's time (8 MB instead of 7).
#
# Environment: RPM_VERSION (default: internal/version.Version),
# RPM_RELEASE (default 1), RPM_ARCH (default: the rpm name of
# `go env GOARCH`), RPM_PAYLOAD (rpm's _binary_payload, default
# w9.gzdio), GO (default go).
set -eu

bindir=${1:?usage: build-rpm.sh BINDIR OUTDIR}
outdir=${2:?usage: build-rpm.sh BINDIR OUTDIR}
GO=${GO:-go}
command -v rpmbuild >/dev/null || { echo "build-rpm.sh: rpmbuild not found (apt-get install rpm)" >&2; exit 1; }

version=${RPM_VERSION:-$(sed -n 's/^const Version = "\(.*\)"$/\1/p' internal/version/version.go)}
compat=$(sed -n 's/^const NVIDIACompat = "\(.*\)"$/\1/p' internal/version/version.go)
[ -n "$version" ] && [ -n "$compat" ] || { echo "build-rpm.sh: no version in internal/version/version.go" >&2; exit 1; }
case $version in *-*) echo "build-rpm.sh: version $version: an rpm version cannot hold '-'" >&2; exit 1 ;; esac
release=${RPM_RELEASE:-1}
arch=${RPM_ARCH:-}
if [ -z "$arch" ]; then
	case $($GO env GOARCH) in
	amd64) arch=x86_64 ;; arm64) arch=aarch64 ;; 386) arch=i686 ;; arm) arch=armv7hl ;;
	ppc64le) arch=ppc64le ;; s390x) arch=s390x ;; riscv64) arch=riscv64 ;;
	*) echo "build-rpm.sh: unknown GOARCH; set RPM_ARCH" >&2; exit 1 ;;
	esac
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/stage" "$work/top"
packaging/stage.sh "$bindir" "$work/stage"

# No debuginfo package, no brp scripts (they would strip the binaries and
# byte-compile nothing); the host's rpm database is not read for build
# dependencies (there are none).
rpmbuild -bb --quiet \
	--target "$arch" \
	--define "_topdir $work/top" \
	--define "nctk_stage $work/stage" \
	--define "nctk_version $version" \
	--define "nctk_release $release" \
	--define "nctk_compat $compat" \
	--define "debug_package %{nil}" \
	--define "__os_install_post %{nil}" \
	--define "_binary_payload ${RPM_PAYLOAD:-w9.gzdio}" \
	--define "_build_id_links none" \
	packaging/rpm/nctk.spec >"$work/rpmbuild.log" 2>&1 || { cat "$work/rpmbuild.log" >&2; exit 1; }

rpm="$work/top/RPMS/$arch/nctk-$version-$release.$arch.rpm"
[ -f "$rpm" ] || { echo "build-rpm.sh: rpmbuild wrote no $rpm" >&2; cat "$work/rpmbuild.log" >&2; exit 1; }
mkdir -p "$outdir"
cp "$rpm" "$outdir/"
echo "$outdir/$(basename "$rpm")"
