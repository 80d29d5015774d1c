package runtime

import (
	"errors"
	"fmt"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/request"
	"github.com/nctk/nctk/internal/specfeed"
)

// earlyCreate is a low-level runtime started on a create before the
// wrapper has edited config.json, which meanwhile is a pipe (specfeed):
// runc spends 3-4 ms starting (on a 2-vCPU VM) before it reads
// config.json, the time the wrapper's discovery, planning and container
// root work take, so the two overlap instead of adding up. runc opens
// config.json once and decodes it whole; if it gets there first, its read
// waits for the final document.
type earlyCreate struct {
	feed  *specfeed.Feed
	child rtChild
	// fed: config.json is final (commit) and the runtime may be creating
	// the container.
	fed bool
	// del deletes the container the runtime created (delete --force).
	del func() error
	// ready waits until the signals this process gets reach the runtime
	// (relay.ready): before it may create the container.
	ready func()
}

// startEarly turns config.json at specPath into a pipe and starts the
// low-level runtime (startRT); on an error config.json is as it was and
// nothing runs. ready is called before the runtime is given config.json
// (commit, keep), del to delete what it created.
func startEarly(specPath string, startRT func() (rtChild, error), del func() error, ready func()) (*earlyCreate, error) {
	feed, err := specfeed.Open(specPath)
	if err != nil {
		return nil, err
	}
	c, err := startRT()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start low-level runtime: %w", err), feed.Restore())
	}
	return &earlyCreate{feed: feed, child: c, del: del, ready: ready}, nil
}

// commit is injectPlan's save: the edited config.json, for the runtime
// waiting on it.
func (x *earlyCreate) commit(doc *ocispec.Doc) error {
	data, err := doc.Bytes()
	if err != nil {
		return fmt.Errorf("write OCI spec: %w", err)
	}
	x.ready()
	if err := x.feed.Commit(data); err != nil {
		return fmt.Errorf("write OCI spec: %w", err)
	}
	x.fed = true
	return nil
}

// keep gives the runtime config.json as it was (orig, its bytes): a
// container with nothing to edit.
func (x *earlyCreate) keep(orig []byte) error {
	x.ready()
	if err := x.feed.Keep(orig); err != nil {
		return errors.Join(fmt.Errorf("restore OCI spec: %w", err), x.stop())
	}
	x.fed = true
	return nil
}

// end finishes the early start once the wrapper's work returned err: on
// an error the runtime is stopped (stop); with no edit made (not a GPU
// container after all) it gets the original, orig; the error is what the
// wrapper reports.
func (x *earlyCreate) end(err error, orig []byte) error {
	switch {
	case err != nil:
		if serr := x.stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop low-level runtime: %w", serr))
		}
		return err
	case !x.fed:
		return x.keep(orig)
	}
	return nil
}

// stop undoes the early start after the wrapper failed: a runtime still
// waiting for config.json is killed before the original comes back (it
// must never create the container from it); one that got the final
// config.json is waited for and its container deleted.
func (x *earlyCreate) stop() error {
	if !x.fed {
		x.child.Kill()
		_, _ = x.child.Wait()
		return x.feed.Restore()
	}
	status, err := x.child.Wait()
	if err != nil || status != 0 {
		return nil // nothing created
	}
	return x.del()
}

// startsEarly tells whether the low-level runtime rt may be started before
// config.json is final: Early when set, else runc (by name), whose create
// reads config.json once, whole, through os.Open and a JSON decoder, which
// a pipe serves as a file. Other runtimes get the file as before.
func (r *Runtime) startsEarly(rt string) bool {
	if r.Early != nil {
		return r.Early(rt)
	}
	switch filepath.Base(rt) {
	case "runc", "docker-runc":
		return true
	}
	return false
}

// mayInject is a quick look at whether the create will have anything
// edited: a device request (request.FromSpec: environment, mounts,
// annotations) or createContainer hooks (an engine's applied CDI spec).
// A container it passes that turns out to need nothing costs the pipe and
// the original handed over (earlyCreate.keep); one it misses is edited
// without the early start.
func mayInject(spec *specs.Spec, cfg *config.Config) bool {
	if spec.Hooks != nil && len(spec.Hooks.CreateContainer) > 0 {
		return true
	}
	req, err := request.FromSpec(spec, cfg)
	if err != nil {
		return false // the planner reports it
	}
	return len(req.CDIDevices) > 0 || req.WantsGPUs()
}
