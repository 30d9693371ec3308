package model

import (
	"slices"
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
	pairs counts[limitKey]
}

type limitKey struct{ account, source string }

const (
	failedFree = 5
	firstWait  = time.Second
	maxWait    = 5 * time.Minute
	// limiterCap bounds the memory of each map of the limiters; past it, the entries idle
	// the longest go.
	limiterCap = 100_000
)

func newLimiter(now func() time.Time) *limiter {
	return &limiter{now: now, pairs: newCounts[limitKey](failedFree)}
}

// failures counts the failed attempts of a key. Attempts reserve their place when they
// start: the attempts in progress count against the free failures, and once those are spent
// only one attempt at a time proceeds, so concurrent guesses get no more checks than
// sequential ones.
type failures struct {
	count   int
	pending int       // attempts started and not ended
	until   time.Time // attempts before this are refused
	last    time.Time // of the last failure
	started time.Time // of the last attempt started
}

// counts holds the failures of keys, the first free of which set no wait; its owner's
// mutex guards it.
type counts[K comparable] struct {
	free int
	cap  int
	m    map[K]*failures
}

func newCounts[K comparable](free int) counts[K] {
	return counts[K]{free: free, cap: limiterCap, m: map[K]*failures{}}
}

// waitAfter is the wait that the n-th failure of a key sets.
func (c *counts[K]) waitAfter(n int) time.Duration {
	if n < c.free {
		return 0
	}
	return min(firstWait<<min(n-c.free, 16), maxWait)
}

// start reserves an attempt of k and returns its reservation, or how long to wait.
func (c *counts[K]) start(k K, now time.Time) (*failures, time.Duration) {
	f := c.m[k]
	// maxWait of quiet clears a key; attempts end within it, so none is still pending.
	if f != nil && now.Sub(later(f.last, f.started)) > maxWait {
		*f = failures{}
	}
	if f == nil {
		if len(c.m) >= c.cap {
			evictIdle(c.m, now, maxWait, c.cap, func(f *failures) time.Time { return later(f.last, f.started) })
		}
		f = &failures{}
		c.m[k] = f
	}
	if now.Before(f.until) {
		return nil, f.until.Sub(now)
	}
	if f.pending > 0 && f.count+f.pending >= c.free {
		// The free failures are spent or reserved: this one waits for the one in progress.
		return nil, c.waitAfter(f.count + f.pending)
	}
	f.pending++
	f.started = now
	return f, 0
}

// end ends the attempt of k that holds reservation r (nil: none), as a failure or not.
func (c *counts[K]) end(k K, r *failures, failed bool, now time.Time) {
	if r != nil {
		r.pending = max(r.pending-1, 0)
	}
	f := c.m[k]
	if failed {
		if f == nil {
			if len(c.m) >= c.cap {
				evictIdle(c.m, now, maxWait, c.cap, func(f *failures) time.Time { return later(f.last, f.started) })
			}
			f = &failures{}
			c.m[k] = f
		}
		f.count++
		f.last = now
		if wait := c.waitAfter(f.count); wait > 0 {
			f.until = now.Add(wait)
		}
	}
	if f != nil && f.count == 0 && f.pending == 0 {
		delete(c.m, k)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// check returns how long an attempt on account from source must wait, without reserving
// one; end it with a nil reservation.
func (l *limiter) check(account, source string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.pairs.m[limitKey{account, source}]
	if f == nil {
		return 0
	}
	now := l.now()
	if now.Sub(later(f.last, f.started)) > maxWait || !now.Before(f.until) {
		return 0
	}
	return f.until.Sub(now)
}

// start reserves an attempt on account from source, or returns how long to wait.
func (l *limiter) start(account, source string) (*failures, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pairs.start(limitKey{account, source}, l.now())
}

// end ends an attempt that start reserved; a success clears the pair.
func (l *limiter) end(account, source string, r *failures, o outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := limitKey{account, source}
	if o == succeeded {
		if r != nil {
			r.pending = max(r.pending-1, 0)
		}
		delete(l.pairs.m, k)
		return
	}
	l.pairs.end(k, r, o == failed, l.now())
}

// outcome is how an attempt ended.
type outcome int

const (
	released outcome = iota // neither failed nor succeeded: an error before the check ended
	failed                  // wrong credentials
	succeeded
)

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
	// globalFailRate a second. Only sources with a failure in the last maxWait are held to
	// it, so that one source draining it does not hold out the others.
	globalFailBurst = 30
	globalFailRate  = 1.0
)

// accountLimiter slows guessing against one account from many sources, and, with a global
// bucket, guessing across many accounts. Sources that authenticated to an account recently
// pass both, so an attacker can delay a new device of the real user but not the known ones.
type accountLimiter struct {
	now func() time.Time

	mu       sync.Mutex
	accounts counts[string]
	trusted  map[limitKey]time.Time // last success of (account, source)
	global   *bucket                // nil: no limit of all accounts together
	failing  map[string]time.Time   // last failure of a source, for the global limit
	cap      int                    // of trusted and failing
}

func newAccountLimiter(now func() time.Time, global bool) *accountLimiter {
	l := &accountLimiter{now: now, accounts: newCounts[string](accountFailedFree), trusted: map[limitKey]time.Time{}, cap: limiterCap}
	if global {
		l.global = &bucket{burst: globalFailBurst, rate: globalFailRate}
		l.failing = map[string]time.Time{}
	}
	return l
}

// accountRes is an attempt's reservation on an accountLimiter.
type accountRes struct {
	trusted bool      // the source passes the account's and the global limit
	count   *failures // of the account
	token   bool      // a token of the global bucket was taken
}

// start reserves an attempt on account from source, or returns how long to wait.
func (l *accountLimiter) start(account, source string) (accountRes, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if at, ok := l.trusted[limitKey{account, source}]; ok && now.Sub(at) < trustFor {
		return accountRes{trusted: true}, 0
	}
	f, wait := l.accounts.start(account, now)
	if wait > 0 {
		return accountRes{}, wait
	}
	r := accountRes{count: f}
	if at, ok := l.failing[source]; ok && now.Sub(at) <= maxWait {
		if wait := l.global.wait(now); wait > 0 {
			l.accounts.end(account, f, false, now)
			return accountRes{}, wait
		}
		l.global.take(now)
		r.token = true
	}
	return r, 0
}

// end ends an attempt that start reserved. A failure counts against the account and, for
// the global limit, marks the source and spends a token if the attempt did not; a success
// trusts the source for the account.
func (l *accountLimiter) end(account, source string, r accountRes, o outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.accounts.end(account, r.count, o == failed, now)
	switch {
	case o == failed && l.global != nil:
		if _, ok := l.failing[source]; !ok && len(l.failing) >= l.cap {
			evictIdle(l.failing, now, maxWait, l.cap, func(at time.Time) time.Time { return at })
		}
		l.failing[source] = now
		if !r.token {
			l.global.take(now)
		}
	case r.token:
		l.global.give(now)
	}
	if o == succeeded {
		k := limitKey{account, source}
		if _, ok := l.trusted[k]; !ok && len(l.trusted) >= l.cap {
			evictIdle(l.trusted, now, trustFor, l.cap, func(at time.Time) time.Time { return at })
		}
		l.trusted[k] = now
	}
}

// attempt is an authentication attempt's reservation on the limiters, from before its
// credentials are checked until it ends. Every attempt that started must end: failed,
// succeeded, or released for any other error (a deferred release does it).
type attempt struct {
	pair        *limiter
	pairAccount string
	pairRes     *failures
	accounts    *accountLimiter // nil: none
	account     string
	accountRes  accountRes
	source      string
	ended       bool
}

// startAttempt reserves an attempt on pairAccount from source in pair and, when accounts is
// not nil, on account in accounts. It returns RATE_LIMITED when one of them refuses.
func startAttempt(pair *limiter, pairAccount string, accounts *accountLimiter, account, source string) (*attempt, error) {
	a := &attempt{pair: pair, pairAccount: pairAccount, accounts: accounts, account: account, source: source}
	var wait time.Duration
	if a.pairRes, wait = pair.start(pairAccount, source); wait > 0 {
		return nil, rateLimited(wait)
	}
	if accounts != nil {
		if a.accountRes, wait = accounts.start(account, source); wait > 0 {
			pair.end(pairAccount, source, a.pairRes, released)
			return nil, rateLimited(wait)
		}
	}
	return a, nil
}

// end ends the attempt with o; later calls do nothing.
func (a *attempt) end(o outcome) {
	if a.ended {
		return
	}
	a.ended = true
	a.pair.end(a.pairAccount, a.source, a.pairRes, o)
	if a.accounts != nil {
		a.accounts.end(a.account, a.source, a.accountRes, o)
	}
}

func (a *attempt) failed()    { a.end(failed) }
func (a *attempt) succeeded() { a.end(succeeded) }
func (a *attempt) release()   { a.end(released) }

// evictIdle drops the entries of m whose last use is older than idle, then, while m holds
// more than half of capacity, the ones used the longest ago.
func evictIdle[K comparable, V any](m map[K]V, now time.Time, idle time.Duration, capacity int, last func(V) time.Time) {
	for k, v := range m {
		if now.Sub(last(v)) > idle {
			delete(m, k)
		}
	}
	if len(m) < capacity {
		return
	}
	type entry struct {
		k  K
		at time.Time
	}
	all := make([]entry, 0, len(m))
	for k, v := range m {
		all = append(all, entry{k, last(v)})
	}
	slices.SortFunc(all, func(a, b entry) int { return a.at.Compare(b.at) })
	for _, e := range all[:len(all)-capacity/2] {
		delete(m, e.k)
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

// take spends a token. Failures of sources the bucket does not hold back (trusted or with no
// recent failure) may overdraw it, down to -burst.
func (b *bucket) take(now time.Time) {
	b.refill(now)
	b.tokens = max(b.tokens-1, -b.burst)
}

// give returns a token an attempt took and did not fail.
func (b *bucket) give(now time.Time) {
	b.refill(now)
	b.tokens = min(b.tokens+1, b.burst)
}
