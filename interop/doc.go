// Package interop is zmesh's interoperability suite with real OpenZiti clients: the ziti CLI
// v1.7.2 and the OpenZiti Go SDK (github.com/openziti/sdk-golang v1.2.10), run against a
// fresh `zmesh quickstart` network by `make interop`: the CLI's scripted admin session, the
// SDK's REST side, and traffic between OpenZiti's clients and zmesh's through the routers
// (data_test.go): sdk-golang dialing a service a zmesh router's tunnel hosts, end-to-end
// encrypted, and listening for zmesh's SDK and tunneler; `ziti tunnel proxy` carrying HTTP;
// a deleted identity's circuit ending; zmesh's SDK on the edge port OpenZiti's clients use;
// the throughput of both SDKs. It is a module of its own, so that zmesh's go.mod does not
// depend on OpenZiti. Its tests are the whole of it; gaps.txt lists the steps known to fail
// today.
package interop
