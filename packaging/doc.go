// Package packaging holds what `make deb` builds the Debian package from
// (build-deb.sh, the nvidia-cdi-refresh systemd units and udev rule, the
// maintainer scripts) and its test, which builds the package and installs,
// upgrades, removes and purges it with dpkg in a temporary root.
package packaging
