package doctor

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/nctk/nctk/internal/hostfile"
)

// Bounds of an image archive.
const (
	// maxArchiveBytes bounds the archive an engine streams (spooled to
	// an unlinked temporary file).
	maxArchiveBytes = 64 << 30
	// maxLayerBytes bounds one layer's uncompressed tar stream.
	maxLayerBytes = 64 << 30
	// maxLayers bounds the layers of an image.
	maxLayers = 1024
	// maxKeptBytes bounds the content kept of all the files the checks
	// read (each one is bounded by hostfile.MaxLibrary).
	maxKeptBytes = 8 << 30
	// maxIndexDepth bounds nested OCI indexes.
	maxIndexDepth = 4
)

// imageConfig is the part of an image's configuration the checks read.
type imageConfig struct {
	Env        []string `json:"Env"`
	Entrypoint []string `json:"Entrypoint"`
	Cmd        []string `json:"Cmd"`
	WorkingDir string   `json:"WorkingDir"`
}

// image is an image read from an archive: its configuration and its
// merged layers. close releases the kept content.
type image struct {
	config imageConfig
	files  *imageIndex
	store  *os.File
}

func (im *image) close() {
	if im != nil && im.store != nil {
		im.store.Close()
	}
}

// member is a regular file of the outer archive.
type member struct{ off, size int64 }

// archiveReader reads an image archive spooled to a file.
type archiveReader struct {
	f       *os.File
	members map[string]member
}

// spool copies r (at most maxArchiveBytes) into an unlinked temporary
// file and indexes the archive's regular files.
func spool(r io.Reader, limit int64) (*archiveReader, error) {
	f, err := os.CreateTemp("", "nctk-doctor-image-*")
	if err != nil {
		return nil, fmt.Errorf("spool the image: %w", err)
	}
	os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("spool the image: %w", err)
	}
	if n > limit {
		f.Close()
		return nil, fmt.Errorf("image archive: %w: over %d bytes", hostfile.ErrTooLarge, limit)
	}
	a := &archiveReader{f: f, members: map[string]member{}}
	sr := io.NewSectionReader(f, 0, n)
	tr := tar.NewReader(sr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("image archive: %w", err)
		}
		if len(a.members) >= maxImageEntries {
			f.Close()
			return nil, fmt.Errorf("image archive: more than %d files", maxImageEntries)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		off, _ := sr.Seek(0, io.SeekCurrent)
		a.members[strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")] = member{off, hdr.Size}
	}
	return a, nil
}

// open returns the member at p (a path inside the archive).
func (a *archiveReader) open(p string) (*io.SectionReader, error) {
	m, ok := a.members[strings.TrimPrefix(path.Clean("/"+p), "/")]
	if !ok {
		return nil, fmt.Errorf("image archive: no %s", p)
	}
	return io.NewSectionReader(a.f, m.off, m.size), nil
}

// readJSON decodes the member p (at most hostfile.MaxConfig bytes).
func (a *archiveReader) readJSON(p string, v any) error {
	r, err := a.open(p)
	if err != nil {
		return err
	}
	data, err := hostfile.ReadAll(r, p, hostfile.MaxConfig)
	if err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("image archive: %s: %w", p, err)
	}
	return nil
}

// digestRe is a blob digest of an OCI layout, compiled on first use: its
// bounded repetition makes a large program, and every nctk tool (the
// runtime on each container create included) would pay for it at start.
var digestRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]+:[a-f0-9]{32,128}$`) })

// ociDesc is an OCI descriptor.
type ociDesc struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Platform  *struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
	} `json:"platform"`
}

func blobOf(d ociDesc) (string, error) {
	if !digestRe().MatchString(d.Digest) {
		return "", fmt.Errorf("image archive: invalid digest %q", d.Digest)
	}
	alg, hex, _ := strings.Cut(d.Digest, ":")
	return "blobs/" + alg + "/" + hex, nil
}

// layout finds the image's config and layers: docker save's
// manifest.json, else an OCI layout's index.json (nested indexes followed
// to the manifest for this machine's platform).
func (a *archiveReader) layout() (config string, layers []string, err error) {
	if _, ok := a.members["manifest.json"]; ok {
		var m []struct {
			Config string
			Layers []string
		}
		if err := a.readJSON("manifest.json", &m); err != nil {
			return "", nil, err
		}
		if len(m) == 0 {
			return "", nil, errors.New("image archive: manifest.json lists no image")
		}
		return m[0].Config, m[0].Layers, nil
	}
	p := "index.json"
	for depth := 0; depth <= maxIndexDepth; depth++ {
		var doc struct {
			MediaType string    `json:"mediaType"`
			Manifests []ociDesc `json:"manifests"`
			Config    *ociDesc  `json:"config"`
			Layers    []ociDesc `json:"layers"`
		}
		if err := a.readJSON(p, &doc); err != nil {
			return "", nil, err
		}
		if doc.Config != nil {
			if config, err = blobOf(*doc.Config); err != nil {
				return "", nil, err
			}
			for _, l := range doc.Layers {
				b, err := blobOf(l)
				if err != nil {
					return "", nil, err
				}
				layers = append(layers, b)
			}
			return config, layers, nil
		}
		if len(doc.Manifests) == 0 {
			return "", nil, fmt.Errorf("image archive: %s names no manifest", p)
		}
		pick := doc.Manifests[0]
		for _, m := range doc.Manifests {
			if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
				pick = m
				break
			}
		}
		if p, err = blobOf(pick); err != nil {
			return "", nil, err
		}
	}
	return "", nil, fmt.Errorf("image archive: indexes nested deeper than %d", maxIndexDepth)
}

// errLayerTooLarge: a layer expands past maxLayerBytes.
var errLayerTooLarge = fmt.Errorf("layer: %w: over %d bytes uncompressed", hostfile.ErrTooLarge, int64(maxLayerBytes))

// boundedReader fails once more than n bytes are read.
type boundedReader struct {
	r io.Reader
	n int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if b.n -= int64(n); b.n < 0 {
		return n, errLayerTooLarge
	}
	return n, err
}

// layerTar opens a layer (plain, gzip or bzip2 tar) as a tar reader.
func (a *archiveReader) layerTar(p string) (*tar.Reader, error) {
	r, err := a.open(p)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(r)
	magic, _ := br.Peek(4)
	var u io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		z, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", p, err)
		}
		u = z
	case bytes.HasPrefix(magic, []byte("BZh")):
		u = bzip2.NewReader(br)
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return nil, fmt.Errorf("layer %s: zstd-compressed layers are not supported", p)
	}
	return tar.NewReader(&boundedReader{u, maxLayerBytes}), nil
}

// readImageArchive reads an image archive — `docker image save` /
// `podman image save` (docker-archive) or an OCI layout tar (`ctr images
// export`) — from r. The layers are merged in order, whiteouts applied,
// into an index of every path; want then names the files whose content
// the checks read, which a second pass keeps (in an unlinked temporary
// file). Everything is bounded: the archive's size, each layer's expanded
// size, the number of files, path lengths, link hops, and the content kept.
func readImageArchive(r io.Reader, want func(*image) []keepFile) (*image, error) {
	a, err := spool(r, maxArchiveBytes)
	if err != nil {
		return nil, err
	}
	defer a.f.Close()
	cfgPath, layers, err := a.layout()
	if err != nil {
		return nil, err
	}
	if len(layers) > maxLayers {
		return nil, fmt.Errorf("image archive: %d layers (at most %d)", len(layers), maxLayers)
	}
	var cfg struct {
		Config imageConfig `json:"config"`
	}
	if err := a.readJSON(cfgPath, &cfg); err != nil {
		return nil, err
	}
	im := &image{config: cfg.Config, files: newImageIndex()}
	for i, l := range layers {
		if err := a.applyLayer(im.files, i, l); err != nil {
			return nil, err
		}
	}
	if err := a.keep(im, want(im), layers); err != nil {
		im.close()
		return nil, err
	}
	return im, nil
}

// applyLayer merges layer number n (member p) into x.
func (a *archiveReader) applyLayer(x *imageIndex, n int, p string) error {
	tr, err := a.layerTar(p)
	if err != nil {
		return err
	}
	for ord := 0; ; ord++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("layer %s: %w", p, err)
		}
		if x.count++; x.count > maxImageEntries {
			return fmt.Errorf("image: more than %d files in its layers", maxImageEntries)
		}
		name, ok := cleanTarName(hdr.Name)
		if !ok {
			x.skipped++
			continue
		}
		// A directory on the way that an earlier entry made a link is
		// followed, inside the image, as the engines do when they apply
		// a layer.
		if dir, e, ok := x.lookup(path.Dir(name)); ok && e.kind == kindDir && dir != path.Dir(name) {
			name = path.Join(dir, path.Base(name))
		}
		if x.whiteout(name, n) {
			continue
		}
		e := &imageEntry{layer: n, size: hdr.Size, src: imageSrc{n, ord}}
		switch hdr.Typeflag {
		case tar.TypeDir:
			e.kind = kindDir
		case tar.TypeReg:
			e.kind = kindRegular
		case tar.TypeSymlink:
			if len(hdr.Linkname) > maxImagePath {
				x.skipped++
				continue
			}
			e.kind, e.target = kindSymlink, hdr.Linkname
		case tar.TypeLink:
			tn, ok := cleanTarName(hdr.Linkname)
			t := x.entries[tn]
			if !ok || t == nil || t.kind != kindRegular {
				x.skipped++
				continue
			}
			e.kind, e.size, e.src = kindRegular, t.size, t.src
		default:
			e.kind = kindOther
		}
		x.put(name, e)
	}
}

// keepFile names a file whose content the checks read, and the largest
// size that is read of it (a larger file is not kept).
type keepFile struct {
	path  string
	limit int64
}

// keep reads the content of the files named (links followed) in a second
// pass over the layers that hold them.
func (a *archiveReader) keep(im *image, files []keepFile, layers []string) error {
	need := map[imageSrc][]*imageEntry{}
	for _, f := range files {
		_, e, ok := im.files.lookup(f.path)
		if !ok || e.kind != kindRegular || e.kept || e.size > f.limit || slices.Contains(need[e.src], e) {
			continue
		}
		need[e.src] = append(need[e.src], e)
	}
	if len(need) == 0 {
		return nil
	}
	store, err := os.CreateTemp("", "nctk-doctor-files-*")
	if err != nil {
		return fmt.Errorf("keep image files: %w", err)
	}
	os.Remove(store.Name())
	im.store = store
	var total int64
	byLayer := map[int]int{} // layer → last ordinal needed
	for s := range need {
		byLayer[s.layer] = max(byLayer[s.layer], s.ordinal)
	}
	for _, l := range slices.Sorted(maps.Keys(byLayer)) {
		tr, err := a.layerTar(layers[l])
		if err != nil {
			return err
		}
		for ord := 0; ord <= byLayer[l]; ord++ {
			hdr, err := tr.Next()
			if err != nil {
				return fmt.Errorf("layer %s: %w", layers[l], err)
			}
			es := need[imageSrc{l, ord}]
			if len(es) == 0 {
				continue
			}
			if total += hdr.Size; total > maxKeptBytes {
				return fmt.Errorf("image: the files to check exceed %d bytes", int64(maxKeptBytes))
			}
			off, err := store.Seek(0, io.SeekEnd)
			if err != nil {
				return fmt.Errorf("keep image files: %w", err)
			}
			n, err := io.Copy(store, io.LimitReader(tr, hdr.Size))
			if err != nil {
				return fmt.Errorf("layer %s: %w", layers[l], err)
			}
			for _, e := range es {
				e.data, e.size, e.kept = io.NewSectionReader(store, off, n), n, true
			}
		}
	}
	return nil
}
