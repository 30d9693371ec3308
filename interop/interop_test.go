package interop

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// TestInterop runs the real OpenZiti clients against a fresh zmesh quickstart network: the
// ziti CLI's scripted admin session, then OpenZiti's Go SDK, then traffic between OpenZiti's
// clients and zmesh's through the routers. Every step is judged against
// gaps.txt (ledger), and a summary of what passes is printed at the end. ZITI_BIN names the
// ziti CLI (`make interop` builds it), ZMESH_BIN the zmesh binary (default ../bin/zmesh).
func TestInterop(t *testing.T) {
	l, err := loadLedger(gapsFile)
	if err != nil {
		t.Fatal(err)
	}
	zitiBin := os.Getenv("ZITI_BIN")
	if zitiBin == "" {
		t.Fatal("ZITI_BIN is not set: run the suite with `make interop`, which builds the ziti CLI")
	}
	zmeshBin := os.Getenv("ZMESH_BIN")
	if zmeshBin == "" {
		zmeshBin = filepath.Join("..", "bin", "zmesh")
	}
	for _, p := range []*string{&zitiBin, &zmeshBin} {
		if *p, err = filepath.Abs(*p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(*p); err != nil {
			t.Fatalf("%v: run the suite with `make interop`", err)
		}
	}

	n := startNetwork(t, zmeshBin)
	t.Run("ziti CLI", func(t *testing.T) { runCLISession(t, l, n, zitiBin) })
	t.Run("sdk-golang", func(t *testing.T) { runSDK(t, l, n, zitiBin) })
	t.Run("data plane", func(t *testing.T) { runSDKData(t, l, n, zitiBin) })

	l.summary(os.Stdout)
	// A filtered run skips steps: only a complete one can tell a stale entry.
	if f := flag.Lookup("test.run"); f == nil || f.Value.String() == "" {
		for _, name := range l.stale() {
			t.Errorf("%s lists %q, which no step of the suite is called: remove or rename it", gapsFile, name)
		}
	}
}
