// Package config reads, checks and fills in zmesh's configuration files: the router's YAML
// (version 3, see docs/router-config.md) and the standalone controller's YAML (version 1, see
// docs/controller-config.md).
//
// Loading a file yields an effective configuration, every default filled in and every value
// parsed into its type, or the full list of problems in it. Each problem names the file, the
// line, the key path and the rule it breaks, so an operator can fix a file in one pass. Keys
// the schema does not know are left out of the effective configuration and returned among the
// warnings, marked as unknown keys with the key they are most likely a typo of: validate makes
// them errors (Strict), while run only warns, because real deployments carry keys of other
// versions.
package config

import (
	"cmp"
	"errors"
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

	// UnknownKey marks a key the schema does not know at its level. The loaders return it
	// among the warnings, so that a router or controller still starts (and says so loudly);
	// Strict makes it an error, as validate does.
	UnknownKey bool
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

// Strict turns the unknown keys among warns into errors, as `zmesh router validate` and
// `zmesh controller validate` treat them: a typo must not pass for a valid file when it
// silently puts a default in place of what the file meant. It returns the other warnings and
// err with the unknown keys added, in line order; an err that is not Errors (the file could
// not be read) is returned as it is.
func Strict(warns []Diagnostic, err error) ([]Diagnostic, error) {
	var errs Errors
	if err != nil && !errors.As(err, &errs) {
		return warns, err
	}
	var rest []Diagnostic
	unknown := false
	for _, w := range warns {
		if w.UnknownKey {
			errs = append(errs, w)
			unknown = true
		} else {
			rest = append(rest, w)
		}
	}
	if !unknown {
		return warns, err
	}
	errs = slices.Clone(errs)
	sortDiagnostics(errs)
	return rest, errs
}

// CountUnknownKeys counts the unknown keys among warns.
func CountUnknownKeys(warns []Diagnostic) int {
	n := 0
	for _, w := range warns {
		if w.UnknownKey {
			n++
		}
	}
	return n
}

func sortDiagnostics(ds []Diagnostic) {
	slices.SortStableFunc(ds, func(a, b Diagnostic) int {
		return cmp.Compare(a.Line, b.Line)
	})
}
