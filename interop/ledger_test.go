package interop

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// gapsFile lists the steps expected to fail today, one a line: "<step> | <reason>".
const gapsFile = "gaps.txt"

// ledger records the outcome of every step of the suite against the known gaps: a step
// that fails and is not a known gap fails the test, and so does a known gap that passes, so
// that gaps.txt can only shrink and never hides a regression.
type ledger struct {
	gaps map[string]string // step -> reason

	mu    sync.Mutex
	steps []outcome
}

type outcome struct {
	suite, name string
	err         error
}

// loadLedger reads path; a missing file is an error (the suite ships one, possibly empty).
func loadLedger(path string) (*ledger, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("known gaps: %w", err)
	}
	defer f.Close()
	l := &ledger{gaps: map[string]string{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, ok := strings.Cut(line, " | ")
		name, reason = strings.TrimSpace(name), strings.TrimSpace(reason)
		if !ok || name == "" || reason == "" {
			return nil, fmt.Errorf("%s:%d: want \"<step> | <reason>\", got %q", path, n, line)
		}
		if _, dup := l.gaps[name]; dup {
			return nil, fmt.Errorf("%s:%d: step %q listed twice", path, n, name)
		}
		l.gaps[name] = reason
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("known gaps: %w", err)
	}
	return l, nil
}

// step runs f as the step name of suite ("cli", "sdk") and judges its outcome against the
// known gaps. It reports whether f succeeded, so that a caller can skip what depends on it.
func (l *ledger) step(t *testing.T, suite, name string, f func() error) bool {
	t.Helper()
	key := suite + ": " + name
	err := f()
	l.mu.Lock()
	for _, o := range l.steps {
		if o.suite+": "+o.name == key {
			l.mu.Unlock()
			t.Errorf("step %q runs twice: steps need unique names", key)
			return err == nil
		}
	}
	l.steps = append(l.steps, outcome{suite, name, err})
	l.mu.Unlock()
	reason, known := l.gaps[key]
	switch {
	case err != nil && known:
		t.Logf("KNOWN GAP %s: %v", key, err)
	case err != nil:
		t.Errorf("FAIL %s: %v", key, err)
	case known:
		t.Errorf("PASSES %s: remove it from %s (listed as %q)", key, gapsFile, reason)
	default:
		t.Logf("ok   %s", key)
	}
	return err == nil
}

// stale returns the known gaps no step of a complete run carried out.
func (l *ledger) stale() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for name := range l.gaps {
		if !slices.ContainsFunc(l.steps, func(o outcome) bool { return o.suite+": "+o.name == name }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// summary writes, per suite, how many steps passed, and every failing step with its error.
func (l *ledger) summary(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, suite := range []struct{ id, what string }{{"cli", "scripted ziti CLI commands"}, {"sdk", "sdk-golang checks"}} {
		var pass, all int
		var failed []outcome
		for _, o := range l.steps {
			if o.suite != suite.id {
				continue
			}
			all++
			if o.err == nil {
				pass++
			} else {
				failed = append(failed, o)
			}
		}
		fmt.Fprintf(w, "interop: %d of %d %s pass\n", pass, all, suite.what)
		for _, o := range failed {
			mark := "known gap"
			if _, known := l.gaps[o.suite+": "+o.name]; !known {
				mark = "NEW FAILURE"
			}
			fmt.Fprintf(w, "  %s: %s: %s\n", mark, o.name, oneLine(o.err.Error()))
		}
	}
}

// oneLine folds an error's lines into one, for the summary.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
