package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrUnknownScenario is wrapped by Run's error when Options.Only names no scenario.
var ErrUnknownScenario = errors.New("is not known")

// selectScenarios returns the scenarios named in only, with the baselines they name, in the
// order of all; every scenario when only is empty. It checks that names are unique and
// path-safe and that every baseline exists.
func selectScenarios(all []Scenario, only []string) ([]Scenario, error) {
	byName := make(map[string]Scenario, len(all))
	var names []string
	for _, sc := range all {
		name := sc.Name()
		if !validName(name) {
			return nil, fmt.Errorf("bench: scenario name %q: use lower-case letters, digits, '-' and '.'", name)
		}
		if _, dup := byName[name]; dup {
			return nil, fmt.Errorf("bench: two scenarios are named %q", name)
		}
		byName[name] = sc
		names = append(names, name)
	}
	for _, sc := range all {
		if b := sc.Baseline(); b != "" {
			if _, ok := byName[b]; !ok || b == sc.Name() {
				return nil, fmt.Errorf("bench: scenario %s names baseline %q, which is not a known scenario", sc.Name(), b)
			}
		}
	}
	if len(only) == 0 {
		return all, nil
	}
	want := make(map[string]bool)
	for _, name := range only {
		sc, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("bench: scenario %q %w; known: %s", name, ErrUnknownScenario, strings.Join(names, ", "))
		}
		for ; sc != nil && !want[sc.Name()]; sc = byName[sc.Baseline()] {
			want[sc.Name()] = true
		}
	}
	return slices.DeleteFunc(slices.Clone(all), func(sc Scenario) bool { return !want[sc.Name()] }), nil
}

func validName(name string) bool {
	if name == "" || name[0] == '-' || name[0] == '.' {
		return false
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '.' {
			return false
		}
	}
	return true
}
