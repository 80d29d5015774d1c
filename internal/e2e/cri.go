package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRINamespace is the containerd namespace of the CRI plugin's images and
// containers.
const CRINamespace = "k8s.io"

// CRI is a client of a containerd's CRI plugin (k8s.io/cri-api, runtime
// v1) over its grpc socket, driving pods and containers as kubelet does.
type CRI struct {
	t       testing.TB
	c       *Containerd
	Runtime runtimeapi.RuntimeServiceClient
	Image   runtimeapi.ImageServiceClient
}

// DialCRI connects to c's CRI plugin (which c's configuration must
// enable) and checks that it answers Version with runtime API v1. The
// connection closes at t's cleanup.
func DialCRI(t testing.TB, c *Containerd) *CRI {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("e2e: cri: dialing %s: %v", c.Socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	r := &CRI{t: t, c: c, Runtime: runtimeapi.NewRuntimeServiceClient(conn), Image: runtimeapi.NewImageServiceClient(conn)}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	v, err := r.Runtime.Version(ctx, &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		t.Fatalf("e2e: cri: Version: %v\ncontainerd log:\n%s", err, tailFile(c.LogFile, 40))
	}
	t.Logf("e2e: cri: %s %s, CRI %s", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
	return r
}

// ImportImage imports rootfs as image name into the CRI plugin's namespace
// (`ctr -n k8s.io image import` of an OCI archive) with cmd as its default
// command, and returns its full reference; the CRI's ImageStatus must then
// know it (within 30 s: containerd 2 learns of it asynchronously).
func (r *CRI) ImportImage(rootfs, name string, cmd ...string) string {
	t := r.t
	t.Helper()
	archive := filepath.Join(r.c.Dir, "cri-import-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".tar")
	if err := writeOCIArchive(rootfs, name, archive, cmd); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(archive)
	argv := r.c.root.Command(r.c.CtrBin, "--address", r.c.Socket, "--namespace", CRINamespace, "image", "import", archive)
	if res := runLogged(t, os.Environ(), RunOpts{}, argv...); !res.OK() {
		t.Fatalf("e2e: cri: importing %s failed:\n%s", name, res)
	}
	ref := FullImageName(name)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// containerd 2's CRI learns of an image from the import's events, a
	// moment after ctr returns.
	for {
		st, err := r.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err == nil && st.Image != nil {
			return ref
		}
		if err != nil || ctx.Err() != nil {
			t.Fatalf("e2e: cri: ImageStatus %s after import: %v (image %v)", ref, err, st.GetImage())
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Pod is a pod sandbox the CRI runs.
type Pod struct {
	ID     string
	Config *runtimeapi.PodSandboxConfig
	// LogDir holds its containers' logs.
	LogDir string
	cri    *CRI
}

// RunPod runs a pod sandbox named name on the host network with the
// runtime handler handler ("" for the CRI's default), its cgroups under
// the containerd's namespace (which StartContainerdWith's cleanup
// removes), and its logs in a directory of its own. As kubelet does for a
// host-network pod, it sets no hostname (the pod shares the node's). The pod is stopped
// and removed at t's cleanup.
func (r *CRI) RunPod(t testing.TB, name, handler string) *Pod {
	t.Helper()
	logDir := TempDir(t, "pod")
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "nctk-e2e", Uid: uniqueName(logDir), Attempt: 0},
		LogDirectory: logDir,
		Labels:       map[string]string{"nctk-e2e": name},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/" + r.c.Namespace + "/" + uniqueName(logDir),
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	resp, err := r.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("e2e: cri: RunPodSandbox %s (handler %q): %v\ncontainerd log:\n%s", name, handler, err, tailFile(r.c.LogFile, 60))
	}
	p := &Pod{ID: resp.PodSandboxId, Config: cfg, LogDir: logDir, cri: r}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := r.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.ID}); err != nil {
			t.Errorf("e2e: cri: StopPodSandbox %s: %v", name, err)
		}
		if _, err := r.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.ID}); err != nil {
			t.Errorf("e2e: cri: RemovePodSandbox %s: %v", name, err)
		}
	})
	return p
}

// CRIRun is a container the CRI ran to its end.
type CRIRun struct {
	// Logs is what the container wrote to stdout and stderr, read back
	// from its CRI log file.
	Logs     string
	ExitCode int32
}

// RunContainer creates the container cfg in the pod (its log at
// <name>.log in the pod's LogDir), starts it, waits up to timeout for it
// to exit and returns its logs and exit code. It fails t when a CRI call
// fails or the container does not exit in time.
func (p *Pod) RunContainer(t testing.TB, cfg *runtimeapi.ContainerConfig, timeout time.Duration) CRIRun {
	t.Helper()
	r := p.cri
	cfg.LogPath = cfg.Metadata.GetName() + ".log"
	ctx, cancel := context.WithTimeout(t.Context(), timeout+time.Minute)
	defer cancel()
	created, err := r.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.ID, Config: cfg, SandboxConfig: p.Config})
	if err != nil {
		t.Fatalf("e2e: cri: CreateContainer %s: %v\ncontainerd log:\n%s", cfg.Metadata.GetName(), err, tailFile(r.c.LogFile, 60))
	}
	id := created.ContainerId
	if _, err := r.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("e2e: cri: StartContainer %s: %v\ncontainerd log:\n%s", cfg.Metadata.GetName(), err, tailFile(r.c.LogFile, 60))
	}
	deadline := time.Now().Add(timeout)
	var st *runtimeapi.ContainerStatus
	for {
		resp, err := r.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("e2e: cri: ContainerStatus %s: %v", id, err)
		}
		st = resp.Status
		if st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e: cri: container %s still %v after %v", cfg.Metadata.GetName(), st.State, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	data, err := os.ReadFile(filepath.Join(p.LogDir, cfg.LogPath))
	if err != nil {
		t.Fatalf("e2e: cri: container log: %v", err)
	}
	logs, err := ParseCRILog(string(data))
	if err != nil {
		t.Fatalf("e2e: cri: container log %s: %v", cfg.LogPath, err)
	}
	return CRIRun{Logs: logs, ExitCode: st.ExitCode}
}

// ParseCRILog returns the content of a CRI container log (lines of
// "<RFC3339Nano time> <stream> <P|F> <content>", P marking a line split
// by the runtime and continued on the next), stdout and stderr
// interleaved as written.
func ParseCRILog(data string) (string, error) {
	var b strings.Builder
	for n, line := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, " ", 4)
		if len(f) < 3 {
			return "", fmt.Errorf("line %d: %q is not <time> <stream> <tag> <content>", n+1, line)
		}
		if len(f) == 4 {
			b.WriteString(f[3])
		}
		if f[2] != "P" {
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}
