// Package packaging holds what `make deb` and `make rpm` build nctk's
// packages from (stage.sh, which installs the files both hold; build-deb.sh
// and the maintainer scripts; build-rpm.sh and rpm/nctk.spec; the
// nvidia-cdi-refresh systemd units and udev rule) and their tests, which
// build each package and install, upgrade and remove it in a temporary
// root: with dpkg (remove, purge) and with rpm (over a stand-in NVIDIA
// package it obsoletes; erase).
package packaging
