package doctor

import (
	"fmt"
	"strings"

	"github.com/nctk/nctk/internal/config"
)

// checkConfigFile: config.toml parses and validates.
func checkConfigFile(h *hostState) []Finding {
	c, p, err := h.config()
	if err != nil {
		shown := p
		if shown == "" {
			shown = config.DefaultPath
		}
		return []Finding{{Severity: Error,
			Problem: "config.toml does not load: " + err.Error(),
			Breaks:  "nvidia-container-runtime, the hook and nvidia-ctk all fail before doing anything (\"error loading config\"); OCI runtime create failed",
			Fix:     fmt.Sprintf("correct the line named, or start again from the defaults: sudo nvidia-ctk config default --output %s", shown),
			Values:  map[string]string{"file": shown},
		}}
	}
	if p == "" {
		return []Finding{{Severity: OK, Problem: "no config.toml: the defaults apply"}}
	}
	out := []Finding{{Severity: OK, Problem: "config.toml loads: " + p}}
	if len(c.Warnings) > 0 {
		out = append(out, Finding{Severity: Warning,
			Problem: fmt.Sprintf("config.toml has %d questionable setting(s): %s", len(c.Warnings), strings.Join(c.Warnings, "; ")),
			Breaks:  "the settings named are ignored or replaced by defaults",
			Fix:     "edit " + p + " (nvidia-ctk config --set KEY=VALUE --in-place)",
			Values:  map[string]string{"file": p}})
	}
	return out
}

// checkConfigRoot: nvidia-container-cli.root names an existing driver root.
func checkConfigRoot(h *hostState) []Finding {
	c := h.cfgOK()
	if c == nil || c.CLI.Root == "" || c.CLI.Root == "/" {
		return nil
	}
	root := h.host(c.CLI.Root)
	if exists(root) {
		return []Finding{{Severity: OK, Problem: "nvidia-container-cli.root " + c.CLI.Root + " exists"}}
	}
	return []Finding{{Severity: Error,
		Problem: fmt.Sprintf("nvidia-container-cli.root = %q names a directory that does not exist", c.CLI.Root),
		Breaks:  `"nvidia-container-cli: initialization error: driver error: failed to process request" / "no NVIDIA driver found under root" on every GPU container`,
		Fix:     fmt.Sprintf("sudo nvidia-ctk config --set nvidia-container-cli.root=/ --in-place --config-file %s (or start the driver container that mounts %s)", h.cfgPath, c.CLI.Root),
		Values:  map[string]string{"root": c.CLI.Root, "file": h.cfgPath},
	}}
}
