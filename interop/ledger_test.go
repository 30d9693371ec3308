package interop

import (
	"bufio"
	"errors"
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
	notes []string // figures for the summary, such as throughput
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
	err := f()
	verdict, bad := l.record(suite, name, err)
	if bad {
		t.Error(verdict)
	} else {
		t.Log(verdict)
	}
	return err == nil
}

// record adds the outcome of a step and judges it: bad is true for a failure not listed in
// the known gaps, a listed step that passes, and a step recorded twice.
func (l *ledger) record(suite, name string, err error) (verdict string, bad bool) {
	key := suite + ": " + name
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.steps {
		if o.suite+": "+o.name == key {
			return fmt.Sprintf("step %q runs twice: steps need unique names", key), true
		}
	}
	l.steps = append(l.steps, outcome{suite, name, err})
	reason, known := l.gaps[key]
	switch {
	case err != nil && known:
		return fmt.Sprintf("KNOWN GAP %s: %v", key, err), false
	case err != nil:
		return fmt.Sprintf("FAIL %s: %v", key, err), true
	case known:
		return fmt.Sprintf("PASSES %s: remove it from %s (listed as %q)", key, gapsFile, reason), true
	default:
		return "ok   " + key, false
	}
}

// note adds a line to the summary.
func (l *ledger) note(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notes = append(l.notes, s)
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
	for _, suite := range []struct{ id, what string }{
		{"cli", "scripted ziti CLI commands"}, {"sdk", "sdk-golang checks"}, {"data", "OpenZiti data-plane checks"},
	} {
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
	for _, n := range l.notes {
		fmt.Fprintf(w, "interop: %s\n", n)
	}
}

// oneLine folds an error's lines into one, for the summary.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// TestLedger checks the judging of steps against a gaps file: only a failure that is listed,
// or a success that is not, is fine; a gap no step names is stale.
func TestLedger(t *testing.T) {
	path := t.TempDir() + "/gaps.txt"
	if err := os.WriteFile(path, []byte("# comment\n\ncli: a | 404 on /a\ncli: b | 404 on /b\nsdk: never run | gone\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := loadLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("404")
	for _, c := range []struct {
		suite, name string
		err         error
		bad         bool
	}{
		{"cli", "a", fail, false}, // a known gap
		{"cli", "b", nil, true},   // a known gap that passes
		{"cli", "c", fail, true},  // a new failure
		{"cli", "d", nil, false},  // a pass
		{"sdk", "a", fail, true},  // another suite's step of the same name
		{"cli", "d", nil, true},   // twice
	} {
		if verdict, bad := l.record(c.suite, c.name, c.err); bad != c.bad {
			t.Errorf("%s: %s with %v judged bad=%v (%s), want %v", c.suite, c.name, c.err, bad, verdict, c.bad)
		}
	}
	if got := l.stale(); !slices.Equal(got, []string{"sdk: never run"}) {
		t.Errorf("stale gaps %q, want [sdk: never run]", got)
	}
	l.note("throughput x: 1 MB/s")
	var sum strings.Builder
	l.summary(&sum)
	for _, want := range []string{"interop: 2 of 4 scripted ziti CLI commands pass", "known gap: a: 404", "NEW FAILURE: c: 404",
		"interop: 0 of 1 sdk-golang checks pass", "interop: throughput x: 1 MB/s"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, sum.String())
		}
	}

	for _, bad := range []string{"cli: no reason\n", "cli: x | a\ncli: x | b\n", " | no step\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadLedger(path); err == nil {
			t.Errorf("the gaps file %q loaded", bad)
		}
	}
}
