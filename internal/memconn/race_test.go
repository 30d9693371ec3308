//go:build race

package memconn

// raceEnabled is set when the tests run with the race detector, whose sync.Pool drops a
// share of what is put back on purpose: allocation counts mean nothing then.
const raceEnabled = true
