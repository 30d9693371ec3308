package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the golden files of the effective configuration")

// goldenEnv is the environment the example files are checked in.
func goldenEnv(name string) (string, bool) {
	switch name {
	case "ZITI_DATA":
		return "/var/lib/zmesh", true
	case "ZMESH_ADMIN_PASSWORD":
		return "correct horse battery staple", true
	}
	return "", false
}

// effective renders a configuration and its warnings the way `zmesh ... validate` does, with
// the absolute testdata directory replaced by <testdata> so the file is the same everywhere.
func effective(t *testing.T, cfg any, warns []Diagnostic) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, w := range warns {
		b.WriteString("# warning: " + w.String() + "\n")
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return []byte(strings.ReplaceAll(b.String(), abs, "<testdata>"))
}

func checkGolden(t *testing.T, golden string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./config -run Golden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("effective configuration differs from %s (after a deliberate change, rerun with -update):\n%s", golden, got)
	}
}

func TestRouterGolden(t *testing.T) {
	t.Parallel()
	cfg, warns, err := LoadRouter("testdata/router-complete.yml", goldenEnv)
	warns, err = Strict(warns, err) // as validate reads it: no unknown keys
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "testdata/router-complete.golden.yml", effective(t, cfg, warns))
}

func TestControllerGolden(t *testing.T) {
	t.Parallel()
	cfg, warns, err := LoadController("testdata/controller-complete.yml", goldenEnv)
	warns, err = Strict(warns, err) // as validate reads it: no unknown keys
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "testdata/controller-complete.golden.yml", effective(t, cfg, warns))
}

// renderer parses a file and returns its effective configuration as YAML.
type renderer func(path string, data []byte, lookupEnv func(string) (string, bool)) ([]byte, error)

func renderRouter(path string, data []byte, lookupEnv func(string) (string, bool)) ([]byte, error) {
	cfg, _, err := ParseRouter(path, data, lookupEnv)
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(cfg)
}

func renderController(path string, data []byte, lookupEnv func(string) (string, bool)) ([]byte, error) {
	cfg, _, err := ParseController(path, data, lookupEnv)
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(cfg)
}

// TestRoundTrip checks that an effective configuration, read again as a file, is unchanged:
// what validate prints is itself a valid and complete configuration.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file   string
		render renderer
	}{
		{"testdata/router-complete.yml", renderRouter},
		{"testdata/controller-complete.yml", renderController},
	} {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			first, err := tt.render(tt.file, data, goldenEnv)
			if err != nil {
				t.Fatal(err)
			}
			second, err := tt.render(tt.file, first, goldenEnv)
			if err != nil {
				t.Fatalf("the effective configuration does not load: %v\n%s", err, first)
			}
			if !bytes.Equal(first, second) {
				t.Errorf("effective configuration changed when read again:\nfirst:\n%s\nsecond:\n%s", first, second)
			}
		})
	}
}
