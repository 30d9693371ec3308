package profile

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// sampleTypes parses a profile file (gzipped pprof protocol buffer) far enough to return its
// sample types as "type/unit": each top-level field must decode, and the sample types'
// indexes must be in the string table.
func sampleTypes(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: not gzip: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var strs []string
	var types [][2]uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("%s: bad tag: %v", path, protowire.ParseError(n))
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			t.Fatalf("%s: bad field %d: %v", path, num, protowire.ParseError(m))
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			switch num {
			case 1: // sample_type: ValueType{type = 1, unit = 2}, indexes into the string table
				var vt [2]uint64
				for len(v) > 0 {
					fn, ft, k := protowire.ConsumeTag(v)
					if k < 0 || ft != protowire.VarintType {
						t.Fatalf("%s: bad sample type", path)
					}
					x, l := protowire.ConsumeVarint(v[k:])
					if l < 0 || fn < 1 || fn > 2 {
						t.Fatalf("%s: bad sample type", path)
					}
					vt[fn-1] = x
					v = v[k+l:]
				}
				types = append(types, vt)
			case 6: // string_table
				strs = append(strs, string(v))
			}
		}
		b = b[m:]
	}
	var out []string
	for _, vt := range types {
		if vt[0] >= uint64(len(strs)) || vt[1] >= uint64(len(strs)) {
			t.Fatalf("%s: sample type %v outside the string table of %d", path, vt, len(strs))
		}
		out = append(out, strs[vt[0]]+"/"+strs[vt[1]])
	}
	return out
}

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
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(mem); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no heap profile written while profiling")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := sampleTypes(t, mem); !slices.Contains(got, "inuse_space/bytes") {
		t.Fatalf("heap profile written during the run has sample types %v", got)
	}
	first := digest(t, mem)
	// Later writes replace the file.
	for digest(t, mem) == first {
		if time.Now().After(deadline) {
			t.Fatal("the heap profile was not rewritten at its interval")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if got := sampleTypes(t, cpu); !slices.Contains(got, "cpu/nanoseconds") {
		t.Fatalf("CPU profile has sample types %v", got)
	}
	if got := sampleTypes(t, mem); !slices.Contains(got, "inuse_space/bytes") {
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
