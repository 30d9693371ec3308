package dataplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zmesh/zmesh/internal/ops/health"
)

// The router's health checks (healthChecks section), run by the health package:
// controllerPing pings every controller (cluster member) the router is connected to, link.health counts the
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
		Run: r.pingControllers}
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

// ctrlPingDetail is one member's answer in the controllerPing check.
type ctrlPingDetail struct {
	ControllerID string `json:"controllerId"`
	Latency      string `json:"latency,omitempty"` // a Go duration
	Error        string `json:"error,omitempty"`
}

// pingControllers pings every connected member. It passes while one answers; its details
// list the connected members, by id, with their answers.
func (r *Router) pingControllers(ctx context.Context) (any, error) {
	chs := r.ctrl.channels()
	if len(chs) == 0 {
		return nil, ErrNoController
	}
	details := make([]ctrlPingDetail, 0, len(chs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for id, ch := range chs {
		wg.Go(func() {
			rtt, err := ch.Ping(ctx)
			mu.Lock()
			defer mu.Unlock()
			d := ctrlPingDetail{ControllerID: id}
			if err != nil {
				d.Error = err.Error()
				errs = append(errs, fmt.Errorf("ping controller %s: %w", id, err))
			} else {
				d.Latency = rtt.String()
			}
			details = append(details, d)
		})
	}
	wg.Wait()
	slices.SortFunc(details, func(a, b ctrlPingDetail) int { return strings.Compare(a.ControllerID, b.ControllerID) })
	if len(errs) == len(chs) {
		return details, errors.Join(errs...)
	}
	return details, nil
}
