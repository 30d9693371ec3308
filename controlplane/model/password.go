package model

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/argon2"
)

// Argon2id parameters for stored passwords: 19 MiB, two passes, one lane (the OWASP
// baseline). They are written into every hash, so they can change without breaking old ones.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonKeyLen    = 32
	argonSaltLen   = 16
)

// hashPassword returns the PHC string of password: $argon2id$v=19$m=..,t=..,p=..$salt$key.
func hashPassword(password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime, argonThreads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// checkPassword reports whether password matches the PHC string hash.
func checkPassword(hash, password string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" || parts[2] != fmt.Sprintf("v=%d", argon2.Version) {
		return false
	}
	var m uint32
	var t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || t == 0 || p == 0 || m > 1<<20 || t > 16 {
		return false
	}
	b64 := base64.RawStdEncoding
	salt, err1 := b64.DecodeString(parts[4])
	want, err2 := b64.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) == 0 || len(want) > 64 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// Bounds of the argon2id work: each check or hash holds argonMemoryKiB while it runs, so the
// number running at once bounds the memory and CPU that authentication takes. Beyond the
// slots, up to hashQueuePerSlot requests per slot wait at most hashQueueWait (the gate's wait); the others are
// refused at once with RATE_LIMITED.
const (
	hashQueuePerSlot = 4
	hashQueueWait    = time.Second
	hashRetryAfter   = time.Second
)

// hashGate bounds the concurrent argon2id work of password checks and hashes.
type hashGate struct {
	slots   chan struct{}
	waiting atomic.Int64
	queue   int64
	wait    time.Duration // the longest a request waits in the queue

	// running and peak count the work in progress, for tests of the bound.
	running, peak atomic.Int64
}

// newHashGate returns a gate of n slots; n <= 0 means GOMAXPROCS.
func newHashGate(n int) *hashGate {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	return &hashGate{slots: make(chan struct{}, n), queue: int64(n * hashQueuePerSlot), wait: hashQueueWait}
}

var errHashBusy = &Error{Code: CodeRateLimited, Message: "the controller is checking too many passwords at once; retry later",
	Cause: &RateLimitedError{RetryAfter: hashRetryAfter}}

// do runs f in a slot, waiting for one in the queue if there is room. It returns a
// RATE_LIMITED error when the queue is full, the wait is over, or ctx ends first.
func (g *hashGate) do(ctx context.Context, f func()) error {
	select {
	case g.slots <- struct{}{}:
	default:
		if g.waiting.Add(1) > g.queue {
			g.waiting.Add(-1)
			return errHashBusy
		}
		timer := time.NewTimer(g.wait)
		var err error
		select {
		case g.slots <- struct{}{}:
		case <-timer.C:
			err = errHashBusy
		case <-ctx.Done():
			err = fmt.Errorf("waiting to check a password: %w", errors.Join(errHashBusy, ctx.Err()))
		}
		timer.Stop()
		g.waiting.Add(-1)
		if err != nil {
			return err
		}
	}
	defer func() { <-g.slots }()
	n := g.running.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	f()
	g.running.Add(-1)
	return nil
}

// hash is hashPassword in a slot of the gate.
func (g *hashGate) hash(ctx context.Context, password string) (hash string, err error) {
	if gateErr := g.do(ctx, func() { hash, err = hashPassword(password) }); gateErr != nil {
		return "", gateErr
	}
	return hash, err
}

// check is checkPassword in a slot of the gate.
func (g *hashGate) check(ctx context.Context, hash, password string) (ok bool, err error) {
	err = g.do(ctx, func() { ok = checkPassword(hash, password) })
	return ok, err
}
