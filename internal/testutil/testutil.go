// Package testutil is for tests only (imported by _test.go files, never by production
// code): waiting for a condition (Eventually, EventuallyNil) rather than for a time. Its
// helpers fail the test (t.Fatal) rather than return errors.
package testutil
