//go:build !race

package memconn

const raceEnabled = false
