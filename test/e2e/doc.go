// Package e2e holds nctk's end-to-end GPU container tests (see
// main_test.go): real runc, dockerd and containerd running a busybox+glibc
// image through nvidia-container-runtime, nvidia-container-runtime-hook and
// nvidia-container-cli configure over fixture driver roots, and the create
// benchmark beside plain runc.
package e2e
