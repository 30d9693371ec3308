//go:build !race

package xgress

const raceEnabled = false
