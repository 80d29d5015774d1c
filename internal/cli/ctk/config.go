package ctk

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nctk/nctk/internal/atomicfile"
	"github.com/nctk/nctk/internal/config"
)

// configCommand is `nvidia-ctk config [flags]` and `nvidia-ctk config
// default [flags]`.
func configCommand(e *env, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "default", "create-default", "generate-default":
			e.path += " " + args[0]
			return configDefault(e, args[1:])
		}
	}
	var (
		path    string
		sets    [][2]string
		inPlace bool
		output  string
	)
	fs := newFlagSet("config")
	fs.String(&path, []string{"config-file", "config", "c"}, nil, "FILE", "the config file (default: --config, else $NVIDIA_CTK_CONFIG_FILE_PATH, $XDG_CONFIG_HOME/nvidia-container-runtime/config.toml or /etc/nvidia-container-runtime/config.toml)")
	fs.Func([]string{"set"}, "KEY[=VALUE]", "set a key (repeatable; a boolean key without a value is set to true; lists are split on commas)", func(s string) error {
		k, v, _ := strings.Cut(s, "=")
		if k = strings.TrimSpace(k); k == "" {
			return fmt.Errorf("--set %q: no key", s)
		}
		sets = append(sets, [2]string{k, v})
		return nil
	})
	fs.Bool(&inPlace, []string{"in-place", "i"}, nil, "write the result back to the config file")
	fs.String(&output, []string{"output", "o"}, nil, "FILE", "write the result to FILE instead of stdout")
	err := parseLeaf(e, fs, args, "[flags] | default [--output FILE]",
		"Print the effective config.toml (the file over the defaults), optionally with changes, or write it back.")
	if err != nil {
		return err
	}
	if inPlace && output != "" {
		return errors.New("--in-place and --output exclude each other")
	}
	mustExist := false
	switch {
	case path != "":
	case e.config != "":
		path = e.config
	default:
		path, mustExist = config.Path(e.Environ)
	}
	cfg, err := config.LoadFile(path, mustExist)
	if err != nil {
		return err
	}
	for _, kv := range sets {
		if err := config.Set(cfg, kv[0], kv[1]); err != nil {
			return err
		}
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if inPlace {
		output = path
	}
	return writeOutput(e, output, config.Render(cfg))
}

func configDefault(e *env, args []string) error {
	var output string
	fs := newFlagSet("default")
	fs.String(&output, []string{"output", "o"}, nil, "FILE", "write the default config to FILE instead of stdout")
	if err := parseLeaf(e, fs, args, "[--output FILE]", "Print the default config.toml."); err != nil {
		return err
	}
	return writeOutput(e, output, config.Render(config.Default()))
}

// writeOutput writes data atomically to path, or to stdout when path is ""
// or "-". An existing file keeps its mode and owner (0644 for a new one), a
// symbolic link is followed, missing directories are created and the write
// is synced.
func writeOutput(e *env, path string, data []byte) error {
	if path == "" || path == "-" {
		_, err := e.Stdout.Write(data)
		return err
	}
	if err := atomicfile.WriteFile(path, data, atomicfile.Options{
		Mode: 0o644, KeepExisting: true, FollowSymlinks: true, DirMode: 0o755, Sync: true,
	}); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	e.log.Info("wrote config", "file", path)
	return nil
}
