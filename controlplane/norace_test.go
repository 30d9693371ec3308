//go:build !race

package controlplane_test

// floodRSSBudget is the RSS growth a login flood may cause.
const floodRSSBudget = 300 << 20
