// Package controlplane is the zmesh controller: the Badger store, the PKI, authentication
// and API sessions, enrollment, policy evaluation, the client and management HTTP APIs, and
// the control channel that routers connect to. It runs standalone or inside a router process.
package controlplane
