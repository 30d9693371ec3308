// Package testutil is for tests only (imported by _test.go files, never by production
// code): waiting for a condition (Eventually, EventuallyNil) rather than for a time, and
// minting keys, certificate requests and certificates, with the project's own PKI
// (controlplane/pki) where it can issue them and by hand where a test needs what that PKI
// never issues (a third party's CA, intermediates, other key types). It imports only the
// standard library and controlplane/pki, so every package but pki and what pki imports may
// use it. Its helpers fail the test (t.Fatal) rather than return errors.
package testutil
