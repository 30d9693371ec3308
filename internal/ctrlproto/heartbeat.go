package ctrlproto

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Heartbeat defaults, the same as the router's ctrl.heartbeats defaults.
const (
	DefaultHeartbeatSendInterval    = 10 * time.Second
	DefaultHeartbeatCheckInterval   = time.Second
	DefaultCloseUnresponsiveTimeout = 30 * time.Second
)

// Heartbeats configure liveness probing. Every SendInterval the channel sends a Ping; the
// peer answers with a Pong, whose round trip is the channel's Latency. Every CheckInterval
// it checks the oldest Ping still unanswered: once that is older than
// CloseUnresponsiveTimeout, the channel closes with ErrUnresponsive. A peer that stops
// reading, or whose reader is stuck, is caught the same way. Zero fields take the
// defaults: 10s, 1s and 30s.
type Heartbeats struct {
	SendInterval             time.Duration
	CheckInterval            time.Duration
	CloseUnresponsiveTimeout time.Duration
}

func (h Heartbeats) withDefaults() Heartbeats {
	if h.SendInterval <= 0 {
		h.SendInterval = DefaultHeartbeatSendInterval
	}
	if h.CheckInterval <= 0 {
		h.CheckInterval = DefaultHeartbeatCheckInterval
	}
	if h.CloseUnresponsiveTimeout <= 0 {
		h.CloseUnresponsiveTimeout = DefaultCloseUnresponsiveTimeout
	}
	return h
}

// Latency is the round trip of the last answered Ping, 0 before the first.
func (c *Channel) Latency() time.Duration { return time.Duration(c.latency.Load()) }

// Ping sends a Ping as a request and returns the round trip; the router's ctrlPingCheck
// health check uses it.
func (c *Channel) Ping(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	if _, err := Call[*Pong](ctx, c, &Ping{T: c.clock()}); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// clock is the channel's monotonic clock: nanoseconds since it was created.
func (c *Channel) clock() int64 { return int64(time.Since(c.epoch)) }

func (c *Channel) heartbeatLoop() {
	hb := c.opts.Heartbeats
	t := time.NewTicker(hb.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		now := c.clock()
		if since := c.unanswered.Load(); since >= 0 && time.Duration(now-since) > hb.CloseUnresponsiveTimeout {
			c.log.Warn("closing the channel: the peer does not answer heartbeats", "for", time.Duration(now-since).Round(time.Millisecond))
			c.shutdown(fmt.Errorf("%w: no answer to heartbeats for %s", ErrUnresponsive, time.Duration(now-since).Round(time.Millisecond)))
			return
		}
		if time.Duration(now-c.lastPingOut.Load()) >= hb.SendInterval {
			c.sendHeartbeat(now)
		}
	}
}

// sendHeartbeat queues a Ping unless the queue is full: a full queue is either a burst,
// and the next tick tries again, or a peer that does not read, which the unanswered
// pings already queued will reveal.
func (c *Channel) sendHeartbeat(now int64) {
	f, err := c.encode(&Ping{T: now}, 0, 0)
	if err != nil {
		return
	}
	if c.tryQueue(f) {
		c.lastPingOut.Store(now)
		c.unanswered.CompareAndSwap(-1, now)
	} else if c.unanswered.Load() < 0 {
		// Nothing in flight proves the peer is alive: count from now.
		c.unanswered.CompareAndSwap(-1, now)
	}
}

func (c *Channel) answerPing(h header, body []byte) {
	var p Ping
	if len(body) > 0 {
		if err := json.Unmarshal(body, &p); err != nil {
			c.log.Debug("malformed ping", "err", err)
		}
	}
	c.reply(h, &Pong{T: p.T})
}

// notePong takes a Pong that echoes a heartbeat this side sent and is the first answer to
// it: that Ping and every earlier one are answered. A Pong echoing no Ping of ours, or an
// earlier one answered already, changes nothing, so a peer cannot keep the channel looking
// alive, nor set its latency, with Pongs of its own making.
func (c *Channel) notePong(body []byte) {
	var p Pong
	if len(body) == 0 || json.Unmarshal(body, &p) != nil {
		return
	}
	since := c.unanswered.Load()
	if since < 0 || p.T < since || p.T > c.lastPingOut.Load() {
		return
	}
	if rtt := c.clock() - p.T; rtt >= 0 {
		c.latency.Store(rtt)
	}
	c.unanswered.CompareAndSwap(since, -1)
}
