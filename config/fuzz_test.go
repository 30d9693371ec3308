package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzEnv sets every variable whose name starts with Z, so that both set and unset
// references are explored.
func fuzzEnv(name string) (string, bool) {
	if strings.HasPrefix(name, "Z") {
		return "/z/" + strings.ToLower(name), true
	}
	return "", false
}

func seed(f *testing.F, docs ...string) {
	files, err := filepath.Glob("testdata/*.yml")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, d := range docs {
		f.Add([]byte(d))
	}
}

// checkLoader is the oracle of both fuzz targets: the loader never panics, returns either a
// configuration or errors, and a configuration it returns reads back unchanged. Values that
// hold a '$' are not read back: the second read would expand them.
func checkLoader(t *testing.T, data []byte, render renderer) {
	first, err := render("/etc/zmesh/fuzz.yml", data, fuzzEnv)
	if err != nil {
		if _, ok := err.(Errors); !ok {
			t.Fatalf("error of type %T: %v", err, err)
		}
		return
	}
	if bytes.Contains(first, []byte("$")) {
		return
	}
	second, err := render("/etc/zmesh/fuzz.yml", first, fuzzEnv)
	if err != nil {
		t.Fatalf("the effective configuration does not load: %v\ninput:\n%s\neffective:\n%s", err, data, first)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("effective configuration changed when read again:\nfirst:\n%s\nsecond:\n%s", first, second)
	}
}

func FuzzParseRouter(f *testing.F) {
	seed(f, minimalRouter, "v: 3\nctrl: {endpoints: ['tls:[::1]:1']}\nidentity: {cert: $ZA, key: ${ZB}, ca: c}\n")
	f.Fuzz(func(t *testing.T, data []byte) { checkLoader(t, data, renderRouter) })
}

func FuzzParseController(f *testing.F) {
	seed(f, minimalController)
	f.Fuzz(func(t *testing.T, data []byte) { checkLoader(t, data, renderController) })
}

func BenchmarkParseRouter(b *testing.B) {
	data, err := os.ReadFile("testdata/router-complete.yml")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseRouter("testdata/router-complete.yml", data, goldenEnv); err != nil {
			b.Fatal(err)
		}
	}
}
