package dataplane

import (
	"context"
	"fmt"
	"time"

	"github.com/zmesh/zmesh/internal/ops/health"
)

// The router's health checks (healthChecks section), run by the health package:
// controllerPing pings the controller over the control channel, link.health counts the
// router's links, certificates says when they expire and fails when renewal is overdue
// (renew.go). Each runs every interval after its initial delay; the web listener's
// `health-checks` API serves their latest results and the registry exports them.

// Ids of the checks, as the health-checks API names them.
const (
	checkControllerPing = "controllerPing"
	checkLinkHealth     = "link.health"
	checkCertificates   = "certificates"
)

// newHealthChecks returns the router's checks, in the order the API lists them. They read
// the control channel and the links, which Run makes before it starts them.
func newHealthChecks(r *Router) *health.Checker {
	hc := r.cfg.HealthChecks
	ping := health.Check{ID: checkControllerPing, InitialDelay: hc.CtrlPingCheck.InitialDelay,
		Interval: hc.CtrlPingCheck.Interval, Timeout: hc.CtrlPingCheck.Timeout,
		Run: func(ctx context.Context) (any, error) {
			ch := r.ctrl.current()
			if ch == nil {
				return nil, ErrNoController
			}
			if _, err := ch.Ping(ctx); err != nil {
				return nil, fmt.Errorf("ping the controller: %w", err)
			}
			return nil, nil
		}}
	minLinks := hc.LinkCheck.MinLinks
	links := health.Check{ID: checkLinkHealth, InitialDelay: hc.LinkCheck.InitialDelay,
		// Listing the links reads memory only; the interval is more than it ever needs.
		Interval: hc.LinkCheck.Interval, Timeout: hc.LinkCheck.Interval,
		Run: func(context.Context) (any, error) {
			type linkDetail struct {
				LinkID       string `json:"linkId"`
				DestRouterID string `json:"destRouterId"`
				Latency      string `json:"latency"` // a Go duration
			}
			details := []linkDetail{}
			for _, l := range r.links.Links() {
				details = append(details, linkDetail{LinkID: l.ID(), DestRouterID: l.PeerID(), Latency: l.Latency().String()})
			}
			if len(details) < minLinks {
				return details, fmt.Errorf("%d links, fewer than healthChecks.linkCheck.minLinks %d", len(details), minLinks)
			}
			return details, nil
		}}
	// Reads memory only; certificates change over days.
	certs := health.Check{ID: checkCertificates, Interval: time.Minute, Timeout: time.Minute, Run: r.certificatesCheck}
	return health.New(ping, links, certs)
}
