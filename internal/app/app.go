// Package app holds what every nctk command-line tool receives from main:
// its argv, standard streams and environment. Tools take an *Env instead of
// reading os.Args or os.Environ so that tests can run them in-process.
package app

import (
	"io"
	"os"
	"strings"

	"github.com/nctk/nctk/internal/hostfile"
)

// Env is a tool's process context.
type Env struct {
	// Args is argv, Args[0] being the name the tool was invoked as.
	Args []string
	// Argv is the process's argv as it was started, of which Args is the
	// tool's part (a multi-call tool's subcommand gets its own Args); nil
	// when Args is all of it.
	Argv    []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	Environ []string
}

// FromOS returns the real process context.
func FromOS() *Env {
	return &Env{Args: os.Args, Argv: os.Args, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Environ: os.Environ()}
}

// ProcessArgs returns the process's argv as it was started: Argv, else
// Args.
func (e *Env) ProcessArgs() []string {
	if e.Argv != nil {
		return e.Argv
	}
	return e.Args
}

// Getenv returns the value of key in Environ ("" if unset).
func (e *Env) Getenv(key string) string {
	v, _ := e.LookupEnv(key)
	return v
}

// LookupEnv returns the value of key in Environ and whether it is set.
func (e *Env) LookupEnv(key string) (string, bool) {
	prefix := key + "="
	for i := len(e.Environ) - 1; i >= 0; i-- {
		if strings.HasPrefix(e.Environ[i], prefix) {
			return e.Environ[i][len(prefix):], true
		}
	}
	return "", false
}

// ReadStdin reads all of Stdin (a hook's OCI state, say), refusing more
// than limit bytes. A nil Stdin reads as empty.
func (e *Env) ReadStdin(limit int) ([]byte, error) {
	if e.Stdin == nil {
		return nil, nil
	}
	return hostfile.ReadAll(e.Stdin, "stdin", int64(limit))
}

// Tool is a command-line tool's entry point; it returns the exit status.
type Tool func(e *Env) int
