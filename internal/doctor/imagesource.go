package doctor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nctk/nctk/internal/echo"
)

// imageEngines are the engines --image reads from, in the order they are
// asked whether they know the image.
func imageEngines() []string { return []string{"docker", "podman", "containerd"} }

// Timeouts of the engine commands.
const (
	imageProbeTimeout  = 30 * time.Second
	imageExportTimeout = 10 * time.Minute
)

// ImageNotFoundError: no engine asked knows the image.
type ImageNotFoundError struct {
	Image string
	// Tried says, per engine asked, why it did not give the image.
	Tried []string
}

func (e *ImageNotFoundError) Error() string {
	return fmt.Sprintf("image %s: no engine knows it (%s)", echo.Quote(e.Image), strings.Join(e.Tried, "; "))
}

// engineCmd is an engine's client command for one image.
type engineCmd struct {
	engine string
	probe  []string // exits 0 when the engine knows the image
	export []string // writes the image archive to stdout
}

// containerdNamespaces are the namespaces searched for an image when none
// is given: Kubernetes', ctr's default and dockerd's.
func containerdNamespaces(ns string) []string {
	if ns != "" {
		return []string{ns}
	}
	return []string{"k8s.io", "default", "moby"}
}

// fullImageName qualifies a short reference as containerd stores it:
// "ubuntu" is docker.io/library/ubuntu:latest.
func fullImageName(name string) string {
	ref := name
	first, _, hasSlash := strings.Cut(ref, "/")
	if !hasSlash || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		if !hasSlash {
			ref = "library/" + ref
		}
		ref = "docker.io/" + ref
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	if !strings.ContainsAny(last, ":@") {
		ref += ":latest"
	}
	return ref
}

// engineCmds are the commands that would get the image from each engine
// wanted, in order.
func (h *hostState) engineCmds(name string) []engineCmd {
	var out []engineCmd
	for _, e := range imageEngines() {
		if len(h.o.Engines) > 0 && !slices.Contains(h.o.Engines, e) {
			continue
		}
		switch e {
		case "docker":
			out = append(out, engineCmd{e, []string{"docker", "image", "inspect", "--format", "{{.Id}}", "--", name},
				[]string{"docker", "image", "save", "--", name}})
		case "podman":
			out = append(out, engineCmd{e, []string{"podman", "image", "exists", "--", name},
				[]string{"podman", "image", "save", "--", name}})
		case "containerd":
			full := fullImageName(name)
			for _, ns := range containerdNamespaces(h.o.ContainerdNamespace) {
				out = append(out, engineCmd{e + " (namespace " + ns + ")",
					[]string{"ctr", "-n", ns, "images", "ls", "-q", "name==" + full},
					[]string{"ctr", "-n", ns, "images", "export", "-", full}})
			}
		}
	}
	return out
}

// environ is the engine clients' environment: Options.Environ (nil: the
// process's), with DOCKER_HOST set from Options.DockerHost.
func (h *hostState) environ() []string {
	env := h.o.Environ
	if h.o.DockerHost != "" {
		env = append(slices.Clone(env), "DOCKER_HOST="+h.o.DockerHost)
		if h.o.Environ == nil {
			env = append(os.Environ(), env...)
		}
	}
	return env
}

// lookClient finds an engine's client on the PATH of Options.Environ
// (nil: the process's).
func (h *hostState) lookClient(name string) (string, error) {
	pathVar := os.Getenv("PATH")
	if h.o.Environ != nil {
		pathVar = ""
		for _, kv := range h.o.Environ {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				pathVar = v
			}
		}
	}
	for _, d := range filepath.SplitList(pathVar) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH", name)
}

// stderrLimit bounds what is kept of a client's stderr.
const stderrLimit = 4096

// limitedBuffer keeps the first stderrLimit bytes written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := stderrLimit - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// probe runs an engine's probe command; it returns "" when the engine
// knows the image, else why not.
func (h *hostState) probe(c engineCmd) string {
	bin, err := h.lookClient(c.probe[0])
	if err != nil {
		return c.engine + ": " + err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), imageProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, c.probe[1:]...)
	cmd.Env = h.environ()
	var stderr, stdout limitedBuffer
	cmd.Stderr, cmd.Stdout = &stderr, &stdout
	err = cmd.Run()
	if err == nil && (c.probe[0] != "ctr" || strings.TrimSpace(stdout.String()) != "") {
		return ""
	}
	msg := strings.TrimSpace(stderr.String())
	if msg == "" && err != nil {
		msg = err.Error()
	}
	if msg == "" {
		msg = "no such image"
	}
	return c.engine + ": " + echo.Line(msg, 200)
}

// loadImage finds an engine that knows the image and reads its archive
// from the engine's export command's stdout. It changes nothing in the
// engine.
func (h *hostState) loadImage(name string, want func(*image) []keepFile) (*image, string, error) {
	nf := &ImageNotFoundError{Image: name}
	for _, c := range h.engineCmds(name) {
		if why := h.probe(c); why != "" {
			nf.Tried = append(nf.Tried, why)
			continue
		}
		im, err := h.export(c, want)
		if err != nil {
			return nil, c.engine, err
		}
		return im, c.engine, nil
	}
	return nil, "", nf
}

// export streams c's export command into readImageArchive.
func (h *hostState) export(c engineCmd, want func(*image) []keepFile) (*image, error) {
	bin, err := h.lookClient(c.export[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.engine, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), imageExportTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, c.export[1:]...)
	cmd.Env = h.environ()
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.engine, err)
	}
	h.log.Debug("doctor: reading image", "engine", c.engine, "command", strings.Join(c.export, " "))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.engine, err)
	}
	im, rerr := readImageArchive(out, want)
	if rerr != nil {
		// The archive is refused: stop the client rather than read the
		// rest of its stream.
		cancel()
		_ = cmd.Wait()
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("%s: %w (%s said: %s)", c.engine, rerr, c.export[0], echo.Line(msg, 300))
		}
		return nil, fmt.Errorf("%s: %w", c.engine, rerr)
	}
	if err := cmd.Wait(); err != nil {
		im.close()
		msg := strings.TrimSpace(stderr.String())
		return nil, fmt.Errorf("%s: %s: %w (%s)", c.engine, strings.Join(c.export, " "), err, echo.Line(msg, 300))
	}
	return im, nil
}
