// Package config reads, checks and fills in zmesh's configuration files: the router's YAML
// (version 3, see docs/router-config.md) and the standalone controller's YAML (version 1, see
// docs/controller-config.md).
//
// Loading a file yields an effective configuration, every default filled in and every value
// parsed into its type, or the full list of problems in it. Each problem names the file, the
// line, the key path and the rule it breaks, so an operator can fix a file in one pass. Keys
// the schema does not know are left out of the effective configuration and reported as
// warnings, because real deployments carry keys of other versions.
package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// A Diagnostic is one problem found in a configuration file.
type Diagnostic struct {
	File    string // path of the file as given to the loader
	Line    int    // 1-based; 0 when the problem concerns the whole file
	Path    string // key path such as "link.dialers[0].groups"; empty for the whole file
	Message string // the rule that is broken, with the offending value
}

func (d Diagnostic) String() string {
	var b strings.Builder
	b.WriteString(d.File)
	if d.Line > 0 {
		fmt.Fprintf(&b, ":%d", d.Line)
	}
	b.WriteString(": ")
	if d.Path != "" {
		b.WriteString(d.Path)
		b.WriteString(": ")
	}
	b.WriteString(d.Message)
	return b.String()
}

// Errors is every error found in one file, in line order. It is the error type returned by
// the loaders.
type Errors []Diagnostic

func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, d := range e {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

func sortDiagnostics(ds []Diagnostic) {
	slices.SortStableFunc(ds, func(a, b Diagnostic) int {
		return cmp.Compare(a.Line, b.Line)
	})
}
