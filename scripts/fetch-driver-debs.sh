#!/usr/bin/env bash
# fetch-driver-debs.sh — download (never install) Debian bookworm's NVIDIA
# user-space driver packages and unpack them into a cache that
# internal/fixture builds test driver roots from.
#
# Usage: scripts/fetch-driver-debs.sh [--force] [--list FILE]
#
#   --force      re-resolve, re-download missing files and re-unpack every set
#   --list FILE  package list (default: scripts/driver-debs.txt next to this script)
#
# Environment:
#   NCTK_CACHE   cache root (default /var/cache/nctk)
#                  $NCTK_CACHE/debs/              downloaded .deb files
#                  $NCTK_CACHE/pkgroot/<set>/     `dpkg -x` of every .deb of a set
#                  $NCTK_CACHE/pkgroot/<set>/.nctk-set   manifest read by internal/fixture
#
# What it does (each step only when needed, so a second run is a no-op):
#   1. enables the contrib, non-free and non-free-firmware components of the
#      Debian sources (/etc/apt/sources.list.d/debian.sources or, on older
#      machines, /etc/apt/sources.list);
#   2. `dpkg --add-architecture i386` (the compat32 set);
#   3. `apt-get update` if 1./2. changed anything or a package is unknown;
#   4. `apt-get download` of the pinned versions in the list (falling back to
#      the current candidate if a pinned version left the archive);
#   5. `dpkg -x` of each set into pkgroot/<set>, a manifest with the driver
#      version found in the library file names and the CUDA driver version
#      that libcuda itself reports (measured with a tiny dlopen probe, needs a
#      C compiler; left empty otherwise).
#
# Needs root for steps 1–4 (not when everything is already cached) and
# network access to the Debian mirrors only.
set -euo pipefail

SCRIPT_VERSION=1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
list="$here/driver-debs.txt"
force=0
while [ $# -gt 0 ]; do
	case "$1" in
	--force) force=1 ;;
	--list)
		shift
		list=${1:?--list needs a file}
		;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "fetch-driver-debs: unknown argument: $1" >&2
		exit 2
		;;
	esac
	shift
done

cache=${NCTK_CACHE:-/var/cache/nctk}
debs="$cache/debs"
pkgroot="$cache/pkgroot"

log() { printf 'fetch-driver-debs: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

[ -r "$list" ] || die "package list $list not readable"

# --- parse the list -------------------------------------------------------------
# entries: "set pkg version optional(0|1)"
entries=()
while read -r set pkg ver opt _; do
	case "$set" in '' | '#'*) continue ;; esac
	[ -n "$ver" ] || die "$list: line for $pkg has no version"
	o=0
	[ "${opt:-}" = optional ] && o=1
	entries+=("$set $pkg $ver $o")
done <"$list"
[ ${#entries[@]} -gt 0 ] || die "$list lists no packages"
sets=$(printf '%s\n' "${entries[@]}" | awk '{print $1}' | sort -u)

list_hash=$( (
	echo "script=$SCRIPT_VERSION"
	grep -v '^[[:space:]]*\(#\|$\)' "$list"
) | sha256sum | awk '{print $1}')

# --- fast path: everything already done for this list ------------------------
complete="$pkgroot/.nctk-complete"
if [ "$force" = 0 ] && [ -f "$complete" ] && [ "$(cat "$complete")" = "$list_hash" ]; then
	ok=1
	for s in $sets; do
		[ -f "$pkgroot/$s/.nctk-set" ] || ok=0
	done
	if [ "$ok" = 1 ]; then
		log "up to date: $pkgroot ($(echo $sets | tr '\n' ' '))"
		exit 0
	fi
fi

[ "$(id -u)" = 0 ] || die "must run as root (apt sources, dpkg architectures, apt-get download); cache $cache is not complete yet"
for tool in apt-get apt-cache dpkg dpkg-deb flock sha256sum; do
	command -v "$tool" >/dev/null || die "$tool not found (is this Debian?)"
done

mkdir -p "$debs" "$pkgroot"
exec 9>"$cache/.lock"
if ! flock -n 9; then
	log "another fetch-driver-debs is running; waiting for it"
	flock 9
fi

need_update=0
updated=0

# --- 1. Debian components ---------------------------------------------------------
wanted_components="main contrib non-free non-free-firmware"
# add_components FILE LINE-REGEX FIRST-FIELD: append the missing
# $wanted_components to every line matching LINE-REGEX, whose components
# start at field FIRST-FIELD; returns 1 when FILE needed no change.
add_components() {
	local f="$1" tmp
	tmp=$(mktemp "$f.XXXXXX")
	awk -v want="$wanted_components" -v re="$2" -v first="$3" '
		$0 ~ re {
			line = $0
			n = split(want, w, " ")
			for (i = 1; i <= n; i++) {
				found = 0
				for (j = first; j <= NF; j++) if ($j == w[i]) found = 1
				if (!found) line = line " " w[i]
			}
			print line
			next
		}
		{ print }' "$f" >"$tmp"
	if cmp -s "$f" "$tmp"; then
		rm -f "$tmp"
		return 1
	fi
	chmod --reference="$f" "$tmp"
	mv "$tmp" "$f"
	return 0
}
add_components_deb822() { # file
	add_components "$1" '^Components:' 2
}
add_components_legacy() { # file: one-line "deb URI suite comp..." format
	add_components "$1" '^[[:space:]]*deb(-src)?[[:space:]].*debian' 4
}
sources=/etc/apt/sources.list.d/debian.sources
if [ -f "$sources" ]; then
	if add_components_deb822 "$sources"; then
		log "enabled components '$wanted_components' in $sources"
		need_update=1
	else
		log "components already enabled in $sources"
	fi
elif [ -f /etc/apt/sources.list ]; then
	if add_components_legacy /etc/apt/sources.list; then
		log "enabled components '$wanted_components' in /etc/apt/sources.list"
		need_update=1
	else
		log "components already enabled in /etc/apt/sources.list"
	fi
else
	die "no Debian apt sources found ($sources or /etc/apt/sources.list)"
fi

# --- 2. i386 --------------------------------------------------------------------------
if printf '%s\n' "${entries[@]}" | awk '{print $2}' | grep -q ':i386$'; then
	if dpkg --print-foreign-architectures | grep -qx i386; then
		log "dpkg architecture i386 already enabled"
	else
		log "dpkg --add-architecture i386"
		dpkg --add-architecture i386
		need_update=1
	fi
fi

# --- 3. apt-get update (only when needed) -----------------------------------------
apt_update() {
	local try
	updated=1
	for try in 1 2 3; do
		if [ "$try" = 1 ]; then log "apt-get update"; else log "apt-get update (retry $try)"; fi
		if apt-get update -qq; then
			return 0
		fi
		sleep $((try * 5))
	done
	# Partial failures (a mirror mid-sync) often still leave usable lists:
	# go on and let the package resolution below decide.
	log "WARNING: apt-get update failed 3 times; continuing with the package lists we have"
}
if [ "$need_update" = 1 ]; then
	apt_update
elif ! apt-cache show libcuda1 >/dev/null 2>&1; then
	log "package lists do not know libcuda1"
	apt_update
fi

# --- 4. resolve and download ---------------------------------------------------------
# resolved: "set pkg version arch file"
resolved=()
downloads=()
# known PKG[:ARCH] VERSION: does apt know exactly this version (and arch)?
# (apt-cache show exits 0 with no output for an unknown PKG:ARCH=VERSION.)
known() {
	local want_arch=""
	case "$1" in *:*) want_arch=${1##*:} ;; esac
	apt-cache show "$1=$2" 2>/dev/null | awk -v v="$2" -v a="$want_arch" '
		/^Version:/ { ver = $2 }
		/^Architecture:/ { arch = $2 }
		/^$/ { if (ver == v && (a == "" || arch == a || arch == "all")) ok = 1; ver = arch = "" }
		END { if (ver == v && (a == "" || arch == a || arch == "all")) ok = 1; exit !ok }'
}
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2; exit}'; }
for e in "${entries[@]}"; do
	read -r set pkg ver opt <<<"$e"
	if ! known "$pkg" "$ver" && [ "$updated" = 0 ]; then
		log "$pkg=$ver unknown to apt"
		apt_update
	fi
	if ! known "$pkg" "$ver"; then
		cand=$(candidate "$pkg")
		if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
			if [ "$opt" = 1 ]; then
				log "skipping optional $pkg: not in the archive"
				continue
			fi
			die "$pkg: pinned $ver not available and no candidate"
		fi
		log "WARNING: pinned $pkg=$ver is gone from the archive, using candidate $cand (update $list)"
		ver=$cand
	fi
	arch=$(apt-cache show "$pkg=$ver" | awk '/^Architecture:/ {print $2; exit}')
	file="${pkg%%:*}_${ver//:/%3a}_${arch}.deb"
	resolved+=("$set $pkg $ver $arch $file")
	if [ ! -s "$debs/$file" ] || ! dpkg-deb --info "$debs/$file" >/dev/null 2>&1; then
		downloads+=("$pkg=$ver")
	fi
done

if [ ${#downloads[@]} -gt 0 ]; then
	log "apt-get download ${#downloads[@]} package(s) into $debs: ${downloads[*]}"
	part="$debs/.partial"
	rm -rf "$part"
	mkdir -p "$part"
	(cd "$part" && apt-get download -q -o APT::Sandbox::User=root "${downloads[@]}") ||
		die "apt-get download failed"
	mv -f "$part"/*.deb "$debs"/
	rm -rf "$part"
else
	log "all ${#resolved[@]} .deb files already in $debs"
fi
for r in "${resolved[@]}"; do
	read -r _ _ _ _ file <<<"$r"
	[ -s "$debs/$file" ] || die "expected $debs/$file after download"
done

# --- 5. unpack per set -------------------------------------------------------------------
probe=""
build_probe() {
	[ -n "$probe" ] && return 0
	local cc
	cc=$(command -v cc || command -v gcc || true)
	if [ -z "$cc" ]; then
		log "no C compiler: cannot measure the CUDA driver version (install gcc to get it)"
		probe=none
		return 0
	fi
	mkdir -p "$cache/bin"
	cat >"$cache/bin/cuda-version-probe.c" <<'EOF'
/* Prints the CUDA driver API version the given libcuda reports
 * (cuDriverGetVersion needs no GPU and no kernel module). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	void *h;
	int (*get)(int *);
	int v = 0, rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s /path/to/libcuda.so.1\n", argv[0]);
		return 2;
	}
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	get = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
	if (get == NULL) {
		fprintf(stderr, "dlsym cuDriverGetVersion: %s\n", dlerror());
		return 1;
	}
	rc = get(&v);
	if (rc != 0) {
		fprintf(stderr, "cuDriverGetVersion returned %d\n", rc);
		return 1;
	}
	printf("%d\n", v);
	return 0;
}
EOF
	if "$cc" -O2 -o "$cache/bin/cuda-version-probe" "$cache/bin/cuda-version-probe.c" -ldl; then
		probe="$cache/bin/cuda-version-probe"
	else
		log "compiling the CUDA version probe failed; CUDA version left empty"
		probe=none
	fi
}

for s in $sets; do
	files=$(printf '%s\n' "${resolved[@]}" | awk -v s="$s" '$1 == s {print $5}' | sort)
	stamp=$( (
		echo "script=$SCRIPT_VERSION"
		echo "$files"
	) | sha256sum | awk '{print $1}')
	dest="$pkgroot/$s"
	if [ "$force" = 0 ] && [ -f "$dest/.nctk-set" ] && grep -qx "stamp=$stamp" "$dest/.nctk-set"; then
		log "set $s already unpacked in $dest"
		continue
	fi
	log "unpacking set $s ($(echo "$files" | wc -l) packages) into $dest"
	tmp="$pkgroot/.$s.tmp"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	for f in $files; do
		dpkg -x "$debs/$f" "$tmp"
	done
	libcuda=$(find "$tmp" -name 'libcuda.so.[0-9]*.*' -type f | head -n1)
	[ -n "$libcuda" ] || libcuda=$(find "$tmp" -name 'libnvidia-ml.so.[0-9]*.*' -type f | head -n1)
	# A set of graphics extras (535-graphics) has neither: its GLX server
	# module carries the driver version.
	[ -n "$libcuda" ] || libcuda=$(find "$tmp" -name 'libglxserver_nvidia.so.[0-9]*.*' -type f | head -n1)
	[ -n "$libcuda" ] || die "set $s: no libcuda.so.<version>, libnvidia-ml.so.<version> or libglxserver_nvidia.so.<version> in the packages"
	base=$(basename "$libcuda")
	drv=${base#lib*.so.}
	others=$(find "$tmp" -name 'lib*.so.*' -type f | sed -n 's/.*\.so\.\([0-9]\{3\}\.[0-9]*\.[0-9]*\)$/\1/p' | sort -u | grep -vxF "$drv" || true)
	if [ -n "$others" ]; then
		log "WARNING: set $s mixes driver $drv with libraries of $(echo $others) (a pinned version fell back to a different candidate?)"
	fi
	cudaver=""
	so1=$(find "$tmp" -name 'libcuda.so.1' | head -n1)
	arch=$(printf '%s\n' "${resolved[@]}" | awk -v s="$s" '$1 == s {print $4; exit}')
	if [ -n "$so1" ] && [ "$arch" = "$(dpkg --print-architecture)" ]; then
		build_probe
		if [ "$probe" != none ]; then
			if cudaver=$(timeout 60 "$probe" "$so1"); then
				log "set $s: libcuda reports CUDA driver version $cudaver"
			else
				log "set $s: could not measure the CUDA driver version"
				cudaver=""
			fi
		fi
	fi
	{
		echo "# written by scripts/fetch-driver-debs.sh; read by internal/fixture"
		echo "set=$s"
		echo "arch=$arch"
		echo "driver_version=$drv"
		echo "cuda_driver_version=$cudaver"
		printf '%s\n' "${resolved[@]}" | awk -v s="$s" '$1 == s {print "package=" $2 "=" $3}'
		echo "stamp=$stamp"
	} >"$tmp/.nctk-set"
	rm -rf "$dest"
	mv "$tmp" "$dest"
	log "set $s: driver $drv ready"
done

# Sets that share a prefix (535-amd64, 535-i386) are one driver: their library
# versions must agree or compat32 lookups (which match the NVRM version in the
# file names) break. internal/fixture refuses such a pair; say it here too.
for p in $(printf '%s\n' $sets | sed 's/-.*//' | sort -u); do
	vers=$(for s in $sets; do
		case "$s" in "$p"-*) sed -n 's/^driver_version=//p' "$pkgroot/$s/.nctk-set" ;; esac
	done | sort -u)
	if [ "$(echo "$vers" | wc -l)" -gt 1 ]; then
		log "WARNING: sets $p-* unpacked different driver versions ($(echo $vers)); pin one version that every architecture has in $list"
	fi
done

# Drop downloaded files the list no longer refers to.
for f in "$debs"/*.deb; do
	[ -e "$f" ] || continue
	b=$(basename "$f")
	if ! printf '%s\n' "${resolved[@]}" | awk '{print $5}' | grep -qxF "$b"; then
		log "removing unreferenced $b"
		rm -f "$f"
	fi
done

echo "$list_hash" >"$complete"
log "done: $pkgroot"
