//go:build !race

package controlplane_test

// floodRSSBase is the RSS growth a login flood may cause besides the argon2id work.
const floodRSSBase = 148 << 20
