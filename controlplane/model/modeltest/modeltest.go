// Package modeltest opens a model on a fresh Badger store and CA in the test's temporary
// directories, for the tests of the packages above model (api, circuits, sessionsync). Tests
// inside package model cannot use it (import cycle).
package modeltest

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/pki"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/testutil"
)

// Store opens a store and a CA, each in a directory of its own; the store is closed when the
// test ends, after the cleanups registered later.
func Store(t testing.TB) (*store.Store, *pki.CA) {
	t.Helper()
	st, err := store.Open(t.TempDir(), quiet(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ca, err := pki.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return st, ca
}

// New opens a model on a new Store. Options left zero get a test's defaults: a session
// timeout of an hour, the issuer https://ctrl.test and a new P-256 signing key with kid "k".
// A nil log discards.
func New(t testing.TB, log *slog.Logger, opts model.Options) (*model.Model, *pki.CA) {
	t.Helper()
	if log == nil {
		log = quiet()
	}
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = time.Hour
	}
	if opts.Issuer == "" {
		opts.Issuer = "https://ctrl.test"
	}
	if opts.SigningKey == nil {
		opts.SigningKey, opts.SigningKID = testutil.NewKey(t), "k"
	}
	st, ca := Store(t)
	return model.New(st, ca, log, opts), ca
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
