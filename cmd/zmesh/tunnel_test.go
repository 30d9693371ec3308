package main

import (
	"strings"
	"testing"
)

// --renew-at takes a fraction of the certificate's lifetime below 1, or 0; anything else is
// a command line that cannot run.
func TestTunnelRenewAt(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1", "1.5", "-0.2"} {
		_, errOut, code := status(t, "tunnel", "proxy", "--service", "echo:2010", "--identity", "/nonexistent/id.json", "--renew-at", v)
		if code != 2 || !strings.Contains(errOut, "--renew-at "+v) {
			t.Errorf("--renew-at %s: exit %d, stderr %q; want exit 2 naming the flag", v, code, errOut)
		}
	}
	// A valid fraction gets past the flag: the missing identity file is what fails.
	_, errOut, code := status(t, "tunnel", "proxy", "--service", "echo:2010", "--identity", "/nonexistent/id.json", "--renew-at", "0.7")
	if code != 1 || !strings.Contains(errOut, "/nonexistent/id.json") {
		t.Errorf("--renew-at 0.7: exit %d, stderr %q; want exit 1 about the identity file", code, errOut)
	}
}
