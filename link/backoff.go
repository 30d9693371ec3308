package link

import (
	"errors"
	"fmt"
	"time"

	"github.com/zmesh/zmesh/config"
)

// nextWait returns how long to wait before the next dial after waiting prev (0: the first
// retry): the policy's minimum first, then each wait RetryBackoffFactor times the last, up
// to the maximum.
func nextWait(b config.Backoff, prev time.Duration) time.Duration {
	lo, hi := b.MinRetryInterval, b.MaxRetryInterval
	if prev < lo {
		return lo
	}
	next := time.Duration(float64(prev) * b.RetryBackoffFactor)
	if next > hi || next < prev {
		return hi
	}
	return next
}

func checkBackoff(b config.Backoff) error {
	switch {
	case b.MinRetryInterval <= 0:
		return errors.New("minRetryInterval must be positive")
	case b.MaxRetryInterval < b.MinRetryInterval:
		return fmt.Errorf("maxRetryInterval %s is below minRetryInterval %s", b.MaxRetryInterval, b.MinRetryInterval)
	case b.RetryBackoffFactor < 1:
		return fmt.Errorf("retryBackoffFactor %g is below 1", b.RetryBackoffFactor)
	}
	return nil
}
