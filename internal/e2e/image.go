package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// WriteRootfsTar writes the tree under root to w as a tar stream with paths
// relative to root, like `tar -C root -c .`: directories, regular files
// (hard links kept as links), symlinks, owners and modes. Device nodes,
// FIFOs and sockets are refused; images from BuildRootfs have none.
func WriteRootfsTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uname, hdr.Gname = "", ""
		switch {
		case fi.IsDir():
			hdr.Name += "/"
		case fi.Mode().IsRegular(), fi.Mode()&fs.ModeSymlink != 0:
		default:
			return fmt.Errorf("%s: unsupported file type %v", p, fi.Mode().Type())
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if fi.Mode().IsRegular() && st.Nlink > 1 {
				key := inode{uint64(st.Dev), st.Ino}
				if first, ok := seen[key]; ok {
					hdr.Typeflag = tar.TypeLink
					hdr.Linkname = first
					hdr.Size = 0
				} else {
					seen[key] = hdr.Name
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("e2e: archiving %s: %w", root, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("e2e: archiving %s: %w", root, err)
	}
	return nil
}

// FullImageName turns a short image name into the fully qualified reference
// the engines store ("e2e:1" -> "docker.io/library/e2e:1"; a name without a
// tag gets ":latest"). ctr needs the full name; docker and podman accept
// both.
func FullImageName(name string) string {
	ref := name
	slash := strings.LastIndex(ref, "/")
	if !strings.Contains(ref[slash+1:], ":") && !strings.Contains(ref, "@") {
		ref += ":latest"
	}
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + ref
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return ref
	default:
		return "docker.io/" + ref
	}
}

// loadOCIArchive writes rootfs as image name to a temporary OCI archive in
// dir (WriteOCIArchive), passes it to load, removes it, and returns the
// image's full reference (FullImageName(name)). It fails t on error.
func loadOCIArchive(t testing.TB, dir, rootfs, name string, load func(archive string)) string {
	t.Helper()
	archive := filepath.Join(dir, "import-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".tar")
	if err := WriteOCIArchive(rootfs, name, archive); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(archive)
	load(archive)
	return FullImageName(name)
}

// WriteOCIArchive writes rootfs as a single-layer image in OCI image-layout
// tar form to dst, named name (qualified with FullImageName) through both the
// containerd ("io.containerd.image.name") and the OCI
// ("org.opencontainers.image.ref.name") annotations. `ctr image import` and
// `podman load` both read it. The image's default command is /bin/sh.
func WriteOCIArchive(rootfs, name, dst string) error {
	return writeOCIArchive(rootfs, name, dst, []string{"/bin/sh"})
}

// writeOCIArchive is WriteOCIArchive with cmd as the image's default
// command.
func writeOCIArchive(rootfs, name, dst string, cmd []string) error {
	ref := FullImageName(name)
	var layer bytes.Buffer
	if err := WriteRootfsTar(&layer, rootfs); err != nil {
		return err
	}
	layerDesc := descriptorOf("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"created":      time.Now().UTC().Format(time.RFC3339),
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"Cmd": cmd,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return fmt.Errorf("e2e: image config: %w", err)
	}
	configDesc := descriptorOf("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []ociDescriptor{layerDesc},
	})
	if err != nil {
		return fmt.Errorf("e2e: image manifest: %w", err)
	}
	manifestDesc := descriptorOf("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref,
	}
	manifestDesc.Platform = &ociPlatform{Architecture: runtime.GOARCH, OS: "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []ociDescriptor{manifestDesc},
	})
	if err != nil {
		return fmt.Errorf("e2e: image index: %w", err)
	}

	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("e2e: creating image archive: %w", err)
	}
	tw := tar.NewWriter(f)
	now := time.Now()
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	err = tw.WriteHeader(&tar.Header{Name: "blobs/", Mode: 0o755, ModTime: now, Typeflag: tar.TypeDir})
	if err == nil {
		err = tw.WriteHeader(&tar.Header{Name: "blobs/sha256/", Mode: 0o755, ModTime: now, Typeflag: tar.TypeDir})
	}
	for _, e := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layerDesc), layer.Bytes()},
		{blobPath(configDesc), config},
		{blobPath(manifestDesc), manifest},
	} {
		if err != nil {
			break
		}
		err = add(e.name, e.data)
	}
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("e2e: writing image archive %s: %w", dst, err)
	}
	return nil
}

type ociPlatform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *ociPlatform      `json:"platform,omitempty"`
}

func descriptorOf(mediaType string, data []byte) ociDescriptor {
	sum := sha256.Sum256(data)
	return ociDescriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func blobPath(d ociDescriptor) string {
	return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
}
