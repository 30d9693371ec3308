//go:build race

package controlplane_test

// floodRSSBudget is the RSS growth a login flood may cause. The race detector's shadow
// memory of every connection the flood opens, on both ends, adds to it.
const floodRSSBudget = 900 << 20
