// Package interop is zmesh's interoperability suite with real OpenZiti clients: the ziti CLI
// v1.7.2 and the OpenZiti Go SDK (github.com/openziti/sdk-golang v1.2.10), run against a
// fresh `zmesh quickstart` network by `make interop`. It is a module of its own, so that
// zmesh's go.mod does not depend on OpenZiti. Its tests are the whole of it; gaps.txt lists
// the steps known to fail today.
package interop
