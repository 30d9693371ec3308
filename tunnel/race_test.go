//go:build race

package tunnel

// raceEnabled is set when the tests run with the race detector, whose sync.Pool drops a
// share of what is put back on purpose: allocation figures mean nothing then.
const raceEnabled = true
