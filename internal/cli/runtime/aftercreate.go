package runtime

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nctk/nctk/internal/aftercreate"
	"github.com/nctk/nctk/internal/app"
)

// createThen waits for the low-level runtime's create, run as a child
// instead of exec'ing it (c, when the caller started it already: see
// earlyCreate; otherwise started here), then does the prepared
// after-create work (nil for none) in the created container (whose init
// the --pid-file names) and returns the create's exit status. A failed
// create is the low-level runtime's to report (its status is returned,
// nothing else is done); when the work fails, the container is deleted
// (`<runtime> <global flags> delete --force <id>`) and the error returned,
// so that no container is left half set up.
func (r *Runtime) createThen(e *app.Env, rt string, argv []string, inv *invocation, after *aftercreate.Prepared, c rtChild, log *logger) (int, error) {
	start := time.Now()
	if c == nil {
		var err error
		r.signals.ready()
		if c, err = r.Start(rt, argv, e.Environ); err != nil {
			return 1, fmt.Errorf("run low-level runtime %s: %w", rt, err)
		}
	}
	status, err := c.Wait()
	if err != nil {
		return 1, fmt.Errorf("run low-level runtime %s: %w", rt, err)
	}
	if status != 0 || after == nil {
		return status, nil
	}
	created := time.Now()
	pid, err := readPidFile(inv.PidFile)
	if err == nil {
		err = after.Apply(pid, log.Logger)
	}
	if err == nil {
		log.Debug("container set up after create", "id", inv.ID, "pid", pid,
			"create", created.Sub(start), "after-create", time.Since(created))
		return 0, nil
	}
	if derr := r.deleteContainer(e, rt, inv); derr != nil {
		return 1, fmt.Errorf("container %s: GPU setup after create: %w (and deleting the container failed: %v)", inv.ID, err, derr)
	}
	return 1, fmt.Errorf("container %s: GPU setup after create: %w (the container was deleted)", inv.ID, err)
}

// deleteContainer runs `<runtime> <global flags> delete --force <id>` for
// the container inv created; a failing status is an error naming it.
func (r *Runtime) deleteContainer(e *app.Env, rt string, inv *invocation) error {
	argv := append([]string{rt}, e.Args[1:inv.CommandIndex]...)
	argv = append(argv, "delete", "--force", inv.ID)
	r.signals.ready()
	c, err := r.Start(rt, argv, e.Environ)
	if err != nil {
		return err
	}
	status, err := c.Wait()
	if err == nil && status != 0 {
		err = fmt.Errorf("%s: exit status %d", strings.Join(argv, " "), status)
	}
	return err
}

// readPidFile reads the container's init pid from the file the low-level
// runtime wrote for --pid-file.
func readPidFile(name string) (int, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return 0, fmt.Errorf("container pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("container pid file %s: %q is not a pid", name, data)
	}
	return pid, nil
}
