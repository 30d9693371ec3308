//go:build race

package controlplane_test

// floodRSSBase is the RSS growth a login flood may cause besides the argon2id work. The race
// detector's shadow memory of every connection the flood opens, on both ends, adds to it.
const floodRSSBase = 748 << 20
