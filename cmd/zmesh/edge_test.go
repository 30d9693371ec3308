package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/ctrltest"
)

// TestEdgeAndEnrollCommands drives the CLI: log in, create identities with enrollment
// tokens, enroll them, list, get and delete.
func TestEdgeAndEnrollCommands(t *testing.T) {
	t.Parallel()
	url := ctrltest.Start(t).URL
	dir := t.TempDir()
	session := filepath.Join(dir, "session.json")
	edge := func(args ...string) (string, string, error) {
		return run(t, nil, append([]string{"edge", "--session-file", session}, args...)...)
	}

	if _, _, err := edge("list", "identities"); err == nil || !strings.Contains(err.Error(), "not logged in") {
		t.Fatalf("list before login: %v", err)
	}
	if _, _, err := edge("login", url, "-u", "admin", "-p", "wrong-pass", "--yes"); apiclient.CodeOf(err) != "INVALID_AUTH" {
		t.Fatalf("login with a wrong password: %v", err)
	}
	out, stderr, err := edge("login", url, "-u", "admin", "-p", "admin-pass", "--yes")
	if err != nil || !strings.Contains(out, "logged in") || !strings.Contains(stderr, "fingerprint") {
		t.Fatalf("login: %v %q %q", err, out, stderr)
	}
	if fi, err := os.Stat(session); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("session file: %v %v", fi, err)
	}

	jwtFile := filepath.Join(dir, "laptop.jwt")
	if out, _, err := edge("create", "identity", "laptop", "--type", "Device", "--ott", "--jwt-output", jwtFile); err != nil || !strings.Contains(out, "created identity laptop") {
		t.Fatalf("create: %v %q", err, out)
	}
	idFile := filepath.Join(dir, "laptop.json")
	if out, _, err := run(t, nil, "enroll", "--jwt", jwtFile, "--out", idFile); err != nil || !strings.Contains(out, "enrolled (ott)") {
		t.Fatalf("enroll: %v %q", err, out)
	}
	if fi, err := os.Stat(idFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity file: %v %v", fi, err)
	}
	id, err := apiclient.LoadIdentity(idFile)
	if err != nil {
		t.Fatal(err)
	}
	client, err := id.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.AuthenticateCert(context.Background()); err != nil {
		t.Fatalf("authenticate with the enrolled identity: %v", err)
	}

	// updb with the password on stdin-less flag.
	updbJWT := filepath.Join(dir, "bob.jwt")
	if _, _, err := edge("create", "identity", "bob", "--updb", "bob1", "--jwt-output", updbJWT); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, nil, "enroll", "--jwt", updbJWT, "--out", filepath.Join(dir, "bob.json"), "--password", "bob-pass"); err != nil {
		t.Fatal(err)
	}

	out, _, err = edge("list", "identities", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if list := decodeList(t, "zmesh edge list identities", out); len(list) != 3 {
		t.Fatalf("list json: %d identities, want 3: %s", len(list), out)
	}
	out, _, err = edge("get", "identity", "laptop", "-o", "json")
	var detail map[string]any
	if err != nil || json.Unmarshal([]byte(out), &detail) != nil || detail["typeId"] != "Device" {
		t.Fatalf("get: %v %s", err, out)
	}
	if out, _, err := edge("delete", "identity", "laptop"); err != nil || !strings.Contains(out, "deleted identity") {
		t.Fatalf("delete: %v %q", err, out)
	}
	if _, _, err := edge("get", "identity", "laptop"); err == nil {
		t.Fatal("get after delete succeeded")
	}
	if _, err := client.AuthenticateCert(context.Background()); apiclient.CodeOf(err) != "INVALID_AUTH" {
		t.Fatalf("deleted identity authenticates: %v", err)
	}
}
