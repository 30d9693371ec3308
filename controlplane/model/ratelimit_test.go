package model

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/zmesh/zmesh/internal/testutil"
)

// attackSource is the i-th attempt's source: 40 addresses in turn.
func attackSource(i int) string { return fmt.Sprintf("198.51.100.%d", i%40+1) }

// limitedFor checks that err is RATE_LIMITED with a wait of at most maxWait, and returns it.
func limitedFor(t *testing.T, err error) time.Duration {
	t.Helper()
	var rl *RateLimitedError
	if CodeOf(err) != CodeRateLimited || !errors.As(err, &rl) {
		t.Fatalf("error %v, want RATE_LIMITED", err)
	}
	if rl.RetryAfter <= 0 || rl.RetryAfter > maxWait {
		t.Fatalf("retry after %v, want more than 0 and at most %v", rl.RetryAfter, maxWait)
	}
	return rl.RetryAfter
}

// TestPasswordGuessesLimitedPerAccount guesses one user's password from 40 sources: the
// account is limited after a few failures whatever the source, the sources the user logged
// in from keep working, and a new source waits at most maxWait.
func TestPasswordGuessesLimitedPerAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.m.EnsureDefaultAdmin(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: "192.0.2.1"}); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i := range 200 {
		_, _, err := f.m.AuthenticatePassword(ctx, "admin", fmt.Sprintf("guess-%d", i), Login{Source: attackSource(i)})
		if CodeOf(err) == CodeInvalidAuth {
			checked++
			continue
		}
		limitedFor(t, err)
	}
	if checked == 0 || checked > 10 {
		t.Errorf("%d of 200 guesses from 40 sources were checked, want 1 to 10", checked)
	}
	if _, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: "192.0.2.1"}); err != nil {
		t.Errorf("the user's known source during the attack: %v", err)
	}
	_, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: "192.0.2.2"})
	limitedFor(t, err)
	// An attacker trying at every opening makes the wait grow to its cap, no longer.
	var wait time.Duration
	for i := range 12 {
		f.clock.Add(maxWait)
		_, _, err := f.m.AuthenticatePassword(ctx, "admin", "guess", Login{Source: attackSource(i)})
		wantCode(t, err, CodeInvalidAuth)
		_, _, err = f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: "192.0.2.2"})
		wait = limitedFor(t, err)
	}
	if wait != maxWait {
		t.Errorf("the wait after a persistent attack: %v, want the cap %v", wait, maxWait)
	}
	// Once the attacker stops, the count decays and the new source gets in.
	f.clock.Add(maxWait + time.Second)
	if _, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: "192.0.2.2"}); err != nil {
		t.Errorf("a new source after the attack: %v", err)
	}
}

// TestMFACodesLimitedPerIdentity guesses an identity's TOTP codes from 40 sources with a
// session that passed the password: limited after a few failures whatever the source, while
// the source that passed MFA before still does.
func TestMFACodesLimitedPerIdentity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.m.EnsureDefaultAdmin(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	s, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	x, err := f.m.EnrollMFA(s.IdentityID)
	if err != nil {
		t.Fatal(err)
	}
	code := func() string {
		c, err := totp.GenerateCode(x.Secret, f.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := f.m.VerifyMFA(s, code(), "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	partial, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: "192.0.2.1"})
	if err != nil || !PendingMFA(partial) {
		t.Fatalf("a login with MFA: %+v, %v", partial, err)
	}
	valid := map[string]bool{}
	for _, d := range []time.Duration{-TOTPPeriod, 0, TOTPPeriod} {
		c, _ := totp.GenerateCode(x.Secret, f.clock.Now().Add(d))
		valid[c] = true
	}
	checked := 0
	for i := range 200 {
		guess := fmt.Sprintf("%06d", i)
		if valid[guess] {
			guess = "999999"
		}
		err := f.m.AuthenticateMFA(partial, guess, attackSource(i))
		if CodeOf(err) == CodeMFAInvalidToken {
			checked++
			continue
		}
		limitedFor(t, err)
	}
	if checked == 0 || checked > 10 {
		t.Errorf("%d of 200 codes from 40 sources were checked, want 1 to 10", checked)
	}
	f.clock.Add(TOTPPeriod)
	if err := f.m.AuthenticateMFA(partial, code(), "192.0.2.1"); err != nil {
		t.Errorf("the source that passed MFA before, during the attack: %v", err)
	}
}

// TestGlobalFailureLimit sprays one guess at each of 200 usernames from 40 sources: a
// source's first failure passes the global limit, then the sources wait, except for the
// accounts they logged in to, and the limit refills at globalFailRate.
func TestGlobalFailureLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.m.EnsureDefaultAdmin(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: attackSource(0)}); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i := range 200 {
		_, _, err := f.m.AuthenticatePassword(ctx, fmt.Sprintf("user-%d", i), "guess", Login{Source: attackSource(i)})
		if CodeOf(err) == CodeInvalidAuth {
			checked++
			continue
		}
		limitedFor(t, err)
	}
	if checked == 0 || checked > 40+globalFailBurst {
		t.Errorf("%d of 200 guesses at different users were checked, want 1 to %d", checked, 40+globalFailBurst)
	}
	if _, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: attackSource(0)}); err != nil {
		t.Errorf("a source that logged in to the account, during its spray: %v", err)
	}
	_, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: attackSource(1)})
	f.clock.Add(limitedFor(t, err))
	_, _, err = f.m.AuthenticatePassword(ctx, "user-x", "guess", Login{Source: attackSource(1)})
	wantCode(t, err, CodeInvalidAuth)
	_, _, err = f.m.AuthenticatePassword(ctx, "user-y", "guess", Login{Source: attackSource(1)})
	limitedFor(t, err)
}

// TestGlobalLimitSparesCleanSources drains the global bucket from one source with guesses at
// fresh usernames: a source without recent failures still logs in, and its wrong passwords
// are still checked, while the draining source waits.
func TestGlobalLimitSparesCleanSources(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.m.EnsureDefaultAdmin(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	const attacker = "203.0.113.9"
	for i := 0; ; i++ {
		_, _, err := f.m.AuthenticatePassword(ctx, fmt.Sprintf("user-%d", i), "guess", Login{Source: attacker})
		if CodeOf(err) == CodeRateLimited {
			break
		}
		wantCode(t, err, CodeInvalidAuth)
		if i >= globalFailBurst {
			t.Fatalf("%d failures from one source at different users, none refused", i+1)
		}
	}
	if _, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: "192.0.2.2"}); err != nil {
		t.Errorf("a new source while another drains the global limit: %v", err)
	}
	_, _, err := f.m.AuthenticatePassword(ctx, "someone", "guess", Login{Source: "192.0.2.3"})
	wantCode(t, err, CodeInvalidAuth)
	_, _, err = f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: attacker})
	limitedFor(t, err)
}

// holdGate takes all slots of the model's gate until the returned function is called.
func holdGate(t *testing.T, m *Model, slots int) (release func()) {
	t.Helper()
	ch := make(chan struct{})
	var held sync.WaitGroup
	for range slots {
		held.Go(func() {
			if err := m.hashes.do(context.Background(), func() { <-ch }); err != nil {
				t.Error(err)
			}
		})
	}
	testutil.Eventually(t, "the slots taken", func() bool { return m.hashes.running.Load() == int64(slots) })
	return func() { close(ch); held.Wait() }
}

// TestConcurrentGuessesReserve sends 20 wrong passwords for one user at once from 20
// sources while the argon2id slots are held, so that every guess the limiters let through
// waits in the gate: a fresh account lets accountFailedFree through, and once the wait they
// set lapses, one.
func TestConcurrentGuessesReserve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.m.EnsureDefaultAdmin(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	const slots, guesses = 2, 20
	f.m.hashes = newHashGate(slots)
	f.m.hashes.wait = time.Hour
	round := func(n, wantChecked int) {
		release := holdGate(t, f.m, slots)
		var mu sync.Mutex
		results := map[string]int{}
		var logins sync.WaitGroup
		for i := range guesses {
			logins.Go(func() {
				_, _, err := f.m.AuthenticatePassword(ctx, "admin", "guess", Login{Source: fmt.Sprintf("198.51.100.%d", n*guesses+i+1)})
				if CodeOf(err) != CodeInvalidAuth {
					limitedFor(t, err)
				}
				mu.Lock()
				results[CodeOf(err)]++
				mu.Unlock()
			})
		}
		testutil.Eventually(t, fmt.Sprintf("%d guesses waiting for a check, the others refused", wantChecked), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return results[CodeRateLimited] == guesses-wantChecked && f.m.hashes.waiting.Load() == int64(wantChecked)
		})
		release()
		logins.Wait()
		if results[CodeInvalidAuth] != wantChecked {
			t.Errorf("round %d: results by code %v, want %d checked", n, results, wantChecked)
		}
	}
	round(0, accountFailedFree)
	f.clock.Add(firstWait)
	round(1, 1)
}

// TestAttemptReservations checks the reservations on the MFA limiters (per pair and per
// identity, no global bucket): attempts in progress count against the free failures, after
// a wait one proceeds at a time, and an attempt released or ended frees its place once.
func TestAttemptReservations(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now().UTC()}
	pair, ids := newLimiter(clk.Now), newAccountLimiter(clk.Now, false)
	start := func(source string) (*attempt, error) { return startAttempt(pair, "mfa:id", ids, "id", source) }
	mustStart := func(source string) *attempt {
		t.Helper()
		a, err := start(source)
		if err != nil {
			t.Fatalf("an attempt from %s: %v", source, err)
		}
		return a
	}
	var tries []*attempt
	for i := range accountFailedFree {
		tries = append(tries, mustStart(fmt.Sprintf("s%d", i)))
	}
	_, err := start("s-more")
	limitedFor(t, err)
	tries[0].release()
	tries[0].release()
	tries[0] = mustStart("s-more")
	_, err = start("s-again")
	limitedFor(t, err)
	for _, a := range tries {
		a.failed()
	}
	_, err = start("s-late")
	clk.Add(limitedFor(t, err))
	late := mustStart("s-late")
	_, err = start("s-other")
	limitedFor(t, err)
	late.release()
	other := mustStart("s-other")
	other.failed()
	other.failed()
	_, err = start("s-next")
	if wait := limitedFor(t, err); wait != 2*firstWait {
		t.Errorf("the wait after %d failures: %v, want %v", accountFailedFree+1, wait, 2*firstWait)
	}
}

// TestEndedChecksRelease checks that logins the gate refuses or whose context ends, and MFA
// checks without an enrollment, give their place back: after many of them the user still
// logs in, and passes MFA, from the same source.
func TestEndedChecksRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	if _, err := f.m.EnsureDefaultAdmin(ctx, "admin", "admin-pass"); err != nil {
		t.Fatal(err)
	}
	const source = "192.0.2.1"
	f.m.hashes = newHashGate(1)
	release := holdGate(t, f.m, 1)
	f.m.hashes.queue = 0
	for range 3 * failedFree {
		_, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: source})
		limitedFor(t, err)
	}
	f.m.hashes.queue = hashQueuePerSlot
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for range 3 * failedFree {
		_, _, err := f.m.AuthenticatePassword(cancelled, "admin", "admin-pass", Login{Source: source})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a login whose context ended: %v", err)
		}
	}
	release()
	s, _, err := f.m.AuthenticatePassword(ctx, "admin", "admin-pass", Login{Source: source})
	if err != nil {
		t.Fatalf("a login after refused ones: %v", err)
	}
	for range 3 * failedFree {
		wantCode(t, f.m.VerifyMFA(s, "123456", source), CodeNotFound)
	}
	x, err := f.m.EnrollMFA(s.IdentityID)
	if err != nil {
		t.Fatal(err)
	}
	code, err := totp.GenerateCode(x.Secret, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.VerifyMFA(s, code, source); err != nil {
		t.Errorf("MFA after checks without an enrollment: %v", err)
	}
}

// TestTrustEvictsOldest fills the trusted sources to capacity: the next one evicts the
// sources that logged in the longest ago, and keeps the recent ones.
func TestTrustEvictsOldest(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now().UTC()}
	l := newAccountLimiter(clk.Now, true)
	l.cap = 32
	login := func(account, source string) {
		r, wait := l.start(account, source)
		if wait > 0 {
			t.Fatalf("%s from %s refused", account, source)
		}
		l.end(account, source, r, succeeded)
	}
	for i := range l.cap {
		clk.Add(time.Second)
		login(fmt.Sprintf("user-%d", i), fmt.Sprintf("192.0.2.%d", i))
	}
	clk.Add(time.Second)
	login("user-new", "2001:db8::1")
	for i := range l.cap {
		_, kept := l.trusted[limitKey{fmt.Sprintf("user-%d", i), fmt.Sprintf("192.0.2.%d", i)}]
		if want := i >= l.cap/2; kept != want {
			t.Errorf("the source of user-%d (logged in %d s before the last) kept %v, want %v", i, l.cap-i, kept, want)
		}
	}
	if len(l.trusted) != l.cap/2+1 {
		t.Errorf("%d trusted sources after eviction, want %d", len(l.trusted), l.cap/2+1)
	}
}

// TestHashGateBound runs 150 logins at once, each of another (unknown) user from another
// source so that only the gate limits them, against a gate of 2 slots whose slots are
// taken: the queue's places wait (as long as it takes: the gate's wait is longer than the
// test), the rest are refused with RATE_LIMITED at once, and no more than 2 argon2id
// computations ever run together.
func TestHashGateBound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	const slots = 2
	f.m.hashes = newHashGate(slots)
	f.m.hashes.wait = time.Hour
	release := make(chan struct{})
	var held sync.WaitGroup
	for range slots {
		held.Go(func() {
			if err := f.m.hashes.do(ctx, func() { <-release }); err != nil {
				t.Error(err)
			}
		})
	}
	testutil.Eventually(t, "the slots taken", func() bool { return f.m.hashes.running.Load() == slots })

	var mu sync.Mutex
	results := map[string]int{}
	var logins sync.WaitGroup
	for i := range 150 {
		logins.Go(func() {
			_, _, err := f.m.AuthenticatePassword(ctx, fmt.Sprintf("user-%d", i), "pass", Login{Source: fmt.Sprintf("10.0.%d.%d", i/200, i%200)})
			if CodeOf(err) != CodeInvalidAuth {
				limitedFor(t, err)
			}
			mu.Lock()
			results[CodeOf(err)]++
			mu.Unlock()
		})
	}
	queue := slots * hashQueuePerSlot
	testutil.Eventually(t, "all but the queue refused, the queue full", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return results[CodeRateLimited] == 150-queue && f.m.hashes.waiting.Load() == int64(queue)
	})
	close(release)
	logins.Wait()
	held.Wait()
	if results[CodeInvalidAuth] != queue || results[CodeRateLimited] != 150-queue {
		t.Errorf("results by code: %v, want %d checked (INVALID_AUTH), the rest RATE_LIMITED", results, queue)
	}
	if peak := f.m.hashes.peak.Load(); peak > slots {
		t.Errorf("%d argon2id computations ran at once, want at most %d", peak, slots)
	}
}

// TestHashGateQueue checks that a waiter whose context ends leaves the queue, that a full
// queue refuses at once, and that a wait ends after hashQueueWait.
func TestHashGateQueue(t *testing.T) {
	t.Parallel()
	g := newHashGate(1)
	release := make(chan struct{})
	held := make(chan error, 1)
	go func() { held <- g.do(context.Background(), func() { <-release }) }()
	testutil.Eventually(t, "the slot taken", func() bool { return g.running.Load() == 1 })

	ctx, cancel := context.WithCancel(t.Context())
	waiters := make(chan error, hashQueuePerSlot)
	for range hashQueuePerSlot {
		go func() { waiters <- g.do(ctx, func() { t.Error("a waiter ran while the slot was held") }) }()
	}
	testutil.Eventually(t, "the queue full", func() bool { return g.waiting.Load() == hashQueuePerSlot })
	err := g.do(context.Background(), func() { t.Error("ran beyond the queue") })
	var rl *RateLimitedError
	if CodeOf(err) != CodeRateLimited || !errors.As(err, &rl) || rl.RetryAfter <= 0 {
		t.Errorf("beyond the queue: %v, want RATE_LIMITED with a wait", err)
	}
	cancel()
	for range hashQueuePerSlot {
		if err := <-waiters; CodeOf(err) != CodeRateLimited || !errors.Is(err, context.Canceled) {
			t.Errorf("a waiter whose context ended: %v", err)
		}
	}
	if n := g.waiting.Load(); n != 0 {
		t.Errorf("%d still waiting after their contexts ended", n)
	}
	if err := g.do(context.Background(), func() { t.Error("ran while the slot was held") }); CodeOf(err) != CodeRateLimited {
		t.Errorf("a wait of hashQueueWait: %v, want RATE_LIMITED", err)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := g.do(context.Background(), func() { ran = true }); err != nil || !ran {
		t.Errorf("a free slot: ran %v, %v", ran, err)
	}
}

// TestEnrollUpdbChecksTokenFirst refuses all argon2id work: updb enrollments with an
// unknown, other-method or expired token get their own error, not RATE_LIMITED, as they are
// refused before the password is hashed; a valid token's enrollment waits for the gate.
func TestEnrollUpdbChecksTokenFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	token := func(name string, req EnrollmentRequest) string {
		t.Helper()
		id, err := f.m.CreateIdentity(IdentityCreate{Name: name, Enrollment: &req})
		if err != nil {
			t.Fatal(err)
		}
		ens, err := f.m.EnrollmentsOf(id.ID)
		if err != nil || len(ens) != 1 {
			t.Fatalf("enrollments: %v, %v", ens, err)
		}
		return ens[0].Token
	}
	updb, ott := token("alice", EnrollmentRequest{Updb: "alice"}), token("bob", EnrollmentRequest{OTT: true})
	f.m.hashes = newHashGate(1)
	release := holdGate(t, f.m, 1)
	defer release()
	f.m.hashes.queue = 0
	wantCode(t, f.m.EnrollUpdb(ctx, newToken(), "secret-pass"), CodeInvalidEnrollmentToken)
	wantCode(t, f.m.EnrollUpdb(ctx, ott, "secret-pass"), CodeInvalidEnrollMethod)
	limitedFor(t, f.m.EnrollUpdb(ctx, updb, "secret-pass"))
	f.clock.Add(DefaultEnrollmentDuration + time.Second)
	wantCode(t, f.m.EnrollUpdb(ctx, updb, "secret-pass"), CodeEnrollmentExpired)
}

// TestCredentialChangeLimited changes a password with wrong current passwords: the failures
// count like failed logins of the username, from that source and from any untrusted one.
func TestCredentialChangeLimited(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	id, err := f.m.CreateIdentity(IdentityCreate{Name: "bobby", Enrollment: &EnrollmentRequest{Updb: "bobby"}})
	if err != nil {
		t.Fatal(err)
	}
	ens, err := f.m.EnrollmentsOf(id.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.EnrollUpdb(ctx, ens[0].Token, "bob-pass"); err != nil {
		t.Fatal(err)
	}
	auths, err := f.m.AuthenticatorsOf(id.ID)
	if err != nil {
		t.Fatal(err)
	}
	newPass := "new-bob-pass"
	change := func(current, source string) error {
		return f.m.ChangeCredentials(ctx, id.ID, auths[0].ID, CredentialsChange{Password: &newPass, CurrentPassword: current, Source: source})
	}
	for i := range failedFree {
		wantCode(t, change(fmt.Sprintf("guess-%d", i), "203.0.113.9"), CodeUnauthorized)
	}
	limitedFor(t, change("guess", "203.0.113.9"))
	limitedFor(t, change("guess", "203.0.113.10"))
	_, _, err = f.m.AuthenticatePassword(ctx, "bobby", "bob-pass", Login{Source: "192.0.2.7"})
	limitedFor(t, err)
	f.clock.Add(maxWait)
	if err := change("bob-pass", "192.0.2.7"); err != nil {
		t.Fatalf("the right current password after the wait: %v", err)
	}
	if _, _, err := f.m.AuthenticatePassword(ctx, "bobby", newPass, Login{Source: "192.0.2.7"}); err != nil {
		t.Errorf("a login with the new password: %v", err)
	}
}

// TestCertLoginsLimited logs in with a certificate of an unknown authority from one source:
// refused after failedFree failures; while 20 logins at once with a valid certificate from
// one source all succeed, as certificate checks reserve nothing.
func TestCertLoginsLimited(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stranger := []*x509.Certificate{testutil.NewAuthority(t, "elsewhere").Issue(t, "mallory", testutil.NewKey(t))}
	for range failedFree {
		_, _, err := f.m.AuthenticateCert(stranger, Login{Source: "203.0.113.9"})
		wantCode(t, err, CodeInvalidAuth)
	}
	_, _, err := f.m.AuthenticateCert(stranger, Login{Source: "203.0.113.9"})
	limitedFor(t, err)

	id, err := f.m.CreateIdentity(IdentityCreate{Name: "device", Enrollment: &EnrollmentRequest{OTT: true}})
	if err != nil {
		t.Fatal(err)
	}
	ens, err := f.m.EnrollmentsOf(id.ID)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := f.m.EnrollOTT(ens[0].Token, testutil.CSR(t, testutil.NewKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	chain := []*x509.Certificate{parseCert(t, certPEM)}
	var logins sync.WaitGroup
	for range 20 {
		logins.Go(func() {
			if _, _, err := f.m.AuthenticateCert(chain, Login{Source: "192.0.2.1"}); err != nil {
				t.Errorf("one of 20 logins at once with a certificate: %v", err)
			}
		})
	}
	logins.Wait()
}
