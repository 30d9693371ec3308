package profile

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/pproftest"
	"github.com/zmesh/zmesh/internal/testutil"
)

func digest(t *testing.T, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// A CPU profile and a heap profile: the heap profile is rewritten at its interval while
// profiling runs, both are valid pprof profiles after Stop, both are private to their owner,
// and no temporary file is left.
func TestCPUAndHeapProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mem.pprof")
	p, err := Start(Options{CPUPath: cpu, MemoryPath: mem, MemoryInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Something to sample and to allocate.
	var sink [][]byte
	for i := 0; i < 2000; i++ {
		sink = append(sink, bytes.Repeat([]byte{byte(i)}, 1024))
	}
	_ = sink
	testutil.EventuallyNil(t, "a heap profile written while profiling", func() error {
		_, err := os.Stat(mem)
		return err
	})
	if got := pproftest.SampleTypes(t, mem); !slices.Contains(got, "inuse_space/bytes") {
		t.Fatalf("heap profile written during the run has sample types %v", got)
	}
	first := digest(t, mem)
	// Later writes replace the file.
	testutil.Eventually(t, "the heap profile rewritten at its interval", func() bool { return digest(t, mem) != first })
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if got := pproftest.SampleTypes(t, cpu); !slices.Contains(got, "cpu/nanoseconds") {
		t.Fatalf("CPU profile has sample types %v", got)
	}
	if got := pproftest.SampleTypes(t, mem); !slices.Contains(got, "inuse_space/bytes") {
		t.Fatalf("final heap profile has sample types %v", got)
	}
	for _, f := range []string{cpu, mem} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("directory holds %v, want the two profiles only", names)
	}
}

// A profile that cannot be written is an error naming its file; a second CPU profile in the
// same process is refused.
func TestProfileErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-dir", "cpu.pprof")
	if _, err := Start(Options{CPUPath: missing}); err == nil || !bytes.Contains([]byte(err.Error()), []byte(missing)) {
		t.Fatalf("Start with %s: %v", missing, err)
	}
	p, err := Start(Options{CPUPath: filepath.Join(dir, "a.pprof")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	second := filepath.Join(dir, "b.pprof")
	if _, err := Start(Options{CPUPath: second}); err == nil || !bytes.Contains([]byte(err.Error()), []byte(second)) {
		t.Fatalf("a second CPU profile: %v", err)
	}
	badMem := filepath.Join(dir, "no-such-dir", "mem.pprof")
	q, err := Start(Options{MemoryPath: badMem, MemoryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Stop(); err == nil || !bytes.Contains([]byte(err.Error()), []byte(badMem)) {
		t.Fatalf("Stop with an unwritable heap profile: %v", err)
	}
}

// With no path, Start does nothing and Stop returns nil.
func TestNoProfiles(t *testing.T) {
	p, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}
