package dataplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// Terminators the router creates and removes on the controller (for the services it hosts)
// go through the rate-limited queue: forwarder.rateLimitedQueueLength requests wait there
// and forwarder.rateLimitedWorkerCount workers send them, so a router hosting many services
// never floods the controller, at start or when it reconnects. A full queue fails the
// request at once. A request waits for the control channel while it is down, for as long as
// its context allows.

// ErrRateLimitedQueueFull: the rate-limited queue to the controller holds
// forwarder.rateLimitedQueueLength requests already.
var ErrRateLimitedQueueFull = errors.New("the rate-limited queue to the controller is full (forwarder.rateLimitedQueueLength)")

// ctrlOp is a request waiting in the rate-limited queue.
type ctrlOp struct {
	ctx  context.Context
	call func(context.Context, *ctrlproto.Channel) error
	done chan error // buffered: the worker never waits for the caller
}

// CreateTerminator asks the controller for a terminator of this router and returns its id.
// Without t.SessionToken the router's own identity hosts it and must be granted Bind on the
// service; creating a terminator the router has already returns the existing one.
func (r *Router) CreateTerminator(ctx context.Context, t *ctrlproto.TerminatorCreate) (string, error) {
	var id string
	err := r.rateLimited(ctx, func(ctx context.Context, ch *ctrlproto.Channel) error {
		reply, err := ctrlproto.Call[*ctrlproto.TerminatorCreateReply](ctx, ch, t)
		if err == nil {
			err = reply.Err()
		}
		if err != nil {
			return err
		}
		id = reply.TerminatorID
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("create terminator of service %q at %s:%s: %w", t.Service, t.Binding, t.Address, err)
	}
	return id, nil
}

// RemoveTerminator asks the controller to remove one of this router's terminators.
func (r *Router) RemoveTerminator(ctx context.Context, id string) error {
	err := r.rateLimited(ctx, func(ctx context.Context, ch *ctrlproto.Channel) error {
		reply, err := ctrlproto.Call[*ctrlproto.TerminatorRemoveReply](ctx, ch, &ctrlproto.TerminatorRemove{TerminatorID: id})
		if err == nil {
			err = reply.Err()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("remove terminator %s: %w", id, err)
	}
	return nil
}

// UpdateTerminator asks the controller to change the cost or precedence of one of this
// router's terminators.
func (r *Router) UpdateTerminator(ctx context.Context, u *ctrlproto.TerminatorUpdate) error {
	err := r.rateLimited(ctx, func(ctx context.Context, ch *ctrlproto.Channel) error {
		reply, err := ctrlproto.Call[*ctrlproto.TerminatorUpdateReply](ctx, ch, u)
		if err == nil {
			err = reply.Err()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("update terminator %s: %w", u.TerminatorID, err)
	}
	return nil
}

// rateLimited queues call and waits for a worker to run it on the control channel.
func (r *Router) rateLimited(ctx context.Context, call func(context.Context, *ctrlproto.Channel) error) error {
	op := &ctrlOp{ctx: ctx, call: call, done: make(chan error, 1)}
	select {
	case <-r.stopped:
		return fmt.Errorf("%w: the router is shutting down", ErrNoController)
	default:
	}
	select {
	case r.ctrlOps <- op:
	default:
		return ErrRateLimitedQueueFull
	}
	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopped:
		return fmt.Errorf("%w: the router is shutting down", ErrNoController)
	}
}

// rateLimitedLoop runs queued requests until ctx ends; requests still queued then fail.
func (r *Router) rateLimitedLoop(ctx context.Context) {
	for {
		select {
		case op := <-r.ctrlOps:
			r.ctrlOpsBusy.Add(1)
			op.done <- r.runOp(ctx, op)
			r.ctrlOpsBusy.Add(-1)
		case <-ctx.Done():
			for {
				select {
				case op := <-r.ctrlOps:
					op.done <- fmt.Errorf("%w: the router is shutting down", ErrNoController)
				default:
					return
				}
			}
		}
	}
}

// runOp runs one request once the control channel is up, within the request's context, the
// router's and the control channel's request timeout.
func (r *Router) runOp(ctx context.Context, op *ctrlOp) error {
	if err := op.ctx.Err(); err != nil {
		return err // its caller stopped waiting
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(op.ctx, cancel)
	defer stop()
	// The timeout starts once a member is connected.
	return r.ctrl.do(ctx, func(ctx context.Context, ch *ctrlproto.Channel) error {
		ctx, cancelT := context.WithTimeout(ctx, r.requestTimeout())
		defer cancelT()
		return op.call(ctx, ch)
	})
}
