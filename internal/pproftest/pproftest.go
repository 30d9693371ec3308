// Package pproftest is for tests only: it reads pprof profile files far enough to check
// them, without a pprof dependency.
package pproftest

import (
	"compress/gzip"
	"io"
	"os"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// SampleTypes parses a profile file (gzipped pprof protocol buffer) far enough to return its
// sample types as "type/unit": each top-level field must decode, and the sample types'
// indexes must be in the string table.
func SampleTypes(t testing.TB, path string) []string {
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
