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
			evictIdle(l.pairs, l.now(), maxWait, func(f *failures) time.Time { return f.last })
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

// Limits per account, from any source, and of all accounts together.
const (
	// accountFailedFree failures of one account are free; then each attempt waits firstWait,
	// doubling with each failure up to maxWait. maxWait of quiet clears the count.
	accountFailedFree = 5
	// trustFor is how long a source that authenticated to an account keeps passing the
	// account's and the global limits (not its own), so that guessing from elsewhere does not
	// hold the real user out.
	trustFor = 30 * 24 * time.Hour
	// Failed attempts of all accounts together: globalFailBurst at once, then
	// globalFailRate a second.
	globalFailBurst = 30
	globalFailRate  = 1.0
)

// accountLimiter slows guessing against one account from many sources, and, with a global
// bucket, guessing across many accounts. Sources that authenticated to an account recently
// pass both, so an attacker can delay a new device of the real user but not the known ones.
type accountLimiter struct {
	now func() time.Time

	mu       sync.Mutex
	accounts map[string]*failures
	trusted  map[limitKey]time.Time // last success of (account, source)
	global   *bucket                // nil: no limit of all accounts together
}

func newAccountLimiter(now func() time.Time, global bool) *accountLimiter {
	l := &accountLimiter{now: now, accounts: map[string]*failures{}, trusted: map[limitKey]time.Time{}}
	if global {
		l.global = &bucket{burst: globalFailBurst, rate: globalFailRate}
	}
	return l
}

// allow reports whether an attempt on account from source may proceed, and if not, how
// long to wait.
func (l *accountLimiter) allow(account, source string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if at, ok := l.trusted[limitKey{account, source}]; ok && now.Sub(at) < trustFor {
		return true, 0
	}
	if f := l.accounts[account]; f != nil {
		if now.Sub(f.last) > maxWait {
			delete(l.accounts, account)
		} else if now.Before(f.until) {
			return false, f.until.Sub(now)
		}
	}
	if l.global != nil {
		if wait := l.global.wait(now); wait > 0 {
			return false, wait
		}
	}
	return true, 0
}

func (l *accountLimiter) failed(account string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	f := l.accounts[account]
	if f == nil {
		if len(l.accounts) >= limiterCap {
			evictIdle(l.accounts, now, maxWait, func(f *failures) time.Time { return f.last })
		}
		f = &failures{}
		l.accounts[account] = f
	}
	f.count++
	f.last = now
	if f.count >= accountFailedFree {
		wait := firstWait << min(f.count-accountFailedFree, 16)
		f.until = now.Add(min(wait, maxWait))
	}
	if l.global != nil {
		l.global.take(now)
	}
}

// succeeded trusts source for account.
func (l *accountLimiter) succeeded(account, source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	k := limitKey{account, source}
	if _, ok := l.trusted[k]; !ok && len(l.trusted) >= limiterCap {
		evictIdle(l.trusted, now, trustFor, func(at time.Time) time.Time { return at })
	}
	l.trusted[k] = now
}

// evictIdle drops the entries of m whose last use is older than idle, or, when none is, half
// of them.
func evictIdle[K comparable, V any](m map[K]V, now time.Time, idle time.Duration, last func(V) time.Time) {
	for k, v := range m {
		if now.Sub(last(v)) > idle {
			delete(m, k)
		}
	}
	if len(m) < limiterCap {
		return
	}
	n := 0
	for k := range m {
		if n++; n > limiterCap/2 {
			break
		}
		delete(m, k)
	}
}

// bucket is a token bucket of failures: burst at once, rate a second after.
type bucket struct {
	burst, rate float64
	tokens      float64
	at          time.Time // of tokens; zero: full
}

func (b *bucket) refill(now time.Time) {
	switch {
	case b.at.IsZero():
		b.tokens = b.burst
	case now.After(b.at):
		b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	default:
		return
	}
	b.at = now
}

// wait returns how long until a token is there; 0 when one is.
func (b *bucket) wait(now time.Time) time.Duration {
	b.refill(now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}

// take spends a token; attempts that passed wait together may overdraw down to -burst.
func (b *bucket) take(now time.Time) {
	b.refill(now)
	b.tokens = max(b.tokens-1, -b.burst)
}
