package main

import (
	"log/slog"
	"slices"

	"github.com/zmesh/zmesh/config"
)

// reportChanges logs one warning per field that differs between the configuration the
// process started with (old) and the file read again (new), but those applied: the fields
// named in applied and what lies under them.
func reportChanges(log *slog.Logger, file string, old, new any, applied []string) {
	changed, err := config.Changed(old, new)
	if err != nil {
		log.Error("reload: cannot compare "+file+" with the running configuration", "err", err)
		return
	}
	for _, f := range changed {
		if slices.ContainsFunc(applied, func(a string) bool { return config.Under(f, a) }) {
			continue
		}
		log.Warn(f + " changed in " + file + ": takes effect at the next start")
	}
}
