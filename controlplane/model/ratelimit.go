package model

import (
	"sync"
	"time"
)

// limiter slows down password and certificate guessing: after failedFree failures of one
// (account, source) pair, further attempts are refused for a wait that doubles with each
// failure, up to maxWait. A success or maxWait of quiet clears the pair, so the real user
// is never locked out for good, and an attacker elsewhere does not lock them out at all.
type limiter struct {
	now func() time.Time

	mu    sync.Mutex
	pairs map[limitKey]*failures
}

type limitKey struct{ account, source string }

type failures struct {
	count int
	until time.Time // attempts before this are refused
	last  time.Time
}

const (
	failedFree = 5
	firstWait  = time.Second
	maxWait    = 5 * time.Minute
	// limiterCap bounds the memory of the limiter; past it, entries idle the longest go.
	limiterCap = 100_000
)

func newLimiter(now func() time.Time) *limiter {
	return &limiter{now: now, pairs: map[limitKey]*failures{}}
}

// allow reports whether an attempt may proceed, and if not, how long to wait.
func (l *limiter) allow(account, source string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.pairs[limitKey{account, source}]
	if f == nil {
		return true, 0
	}
	now := l.now()
	if now.Sub(f.last) > maxWait {
		delete(l.pairs, limitKey{account, source})
		return true, 0
	}
	if now.Before(f.until) {
		return false, f.until.Sub(now)
	}
	return true, 0
}

func (l *limiter) failed(account, source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := limitKey{account, source}
	f := l.pairs[k]
	if f == nil {
		if len(l.pairs) >= limiterCap {
			l.evict()
		}
		f = &failures{}
		l.pairs[k] = f
	}
	now := l.now()
	f.count++
	f.last = now
	if f.count >= failedFree {
		wait := firstWait << min(f.count-failedFree, 16)
		f.until = now.Add(min(wait, maxWait))
	}
}

func (l *limiter) succeeded(account, source string) {
	l.mu.Lock()
	delete(l.pairs, limitKey{account, source})
	l.mu.Unlock()
}

// evict drops entries idle for longer than maxWait, or, when none is, half of them.
func (l *limiter) evict() {
	now := l.now()
	for k, f := range l.pairs {
		if now.Sub(f.last) > maxWait {
			delete(l.pairs, k)
		}
	}
	if len(l.pairs) < limiterCap {
		return
	}
	n := 0
	for k := range l.pairs {
		if n++; n > limiterCap/2 {
			break
		}
		delete(l.pairs, k)
	}
}
