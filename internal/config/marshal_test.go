package config

// Marshal writes the configuration with every key explicit (nothing
// commented out), unknown keys kept in their tables: Render without the
// commented-out defaults, for tests that parse what was rendered.
func Marshal(cfg *Config) ([]byte, error) { return render(cfg, false), nil }
