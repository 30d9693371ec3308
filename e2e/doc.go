// Package e2e holds zmesh's end-to-end tests. They build the zmesh binary, run a controller
// and routers as separate processes in network namespaces the tests create (joined by veth
// pairs), configure the network over the management API as an administrator would, and check
// from a client namespace what a user of the network sees.
//
// The tests need root (network namespaces, veth pairs, nftables) and skip without it.
// Nothing they do touches the host's network namespace, routes or files outside their
// temporary directories: every address, route and rule lives in a namespace the test made,
// and the namespaces and processes end with the test. The package holds no code outside
// its tests.
package e2e
