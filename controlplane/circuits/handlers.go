package circuits

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// Register installs the handlers of a router's circuit, link and terminator messages on its
// control channel.
func (s *Service) Register(router string, ch *ctrlproto.Channel, mesh *Mesh) {
	ch.HandleAsync(ctrlproto.TypeCircuitRequest, func(ctx context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		return s.Create(ctx, router, msg.(*ctrlproto.CircuitRequest)), nil
	})
	ch.HandleAsync(ctrlproto.TypeFault, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		s.Fault(router, msg.(*ctrlproto.Fault))
		return nil, nil
	})
	ch.Handle(ctrlproto.TypeIdleCircuitsCheck, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		return &ctrlproto.IdleCircuitsReply{Valid: s.Valid(msg.(*ctrlproto.IdleCircuitsCheck).CircuitIDs)}, nil
	})
	ch.Handle(ctrlproto.TypeLinkState, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		mesh.LinkState(router, msg.(*ctrlproto.LinkState))
		return nil, nil
	})
	ch.HandleAsync(ctrlproto.TypeTerminatorCreate, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		return s.createTerminator(router, msg.(*ctrlproto.TerminatorCreate)), nil
	})
	ch.HandleAsync(ctrlproto.TypeTunnelServices, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		return s.tunnelServices(router, msg.(*ctrlproto.TunnelServices)), nil
	})
	ch.HandleAsync(ctrlproto.TypeTerminatorRemove, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		return s.removeTerminator(router, msg.(*ctrlproto.TerminatorRemove)), nil
	})
	ch.HandleAsync(ctrlproto.TypeTerminatorUpdate, func(_ context.Context, msg ctrlproto.Message) (ctrlproto.Message, error) {
		return s.updateTerminator(router, msg.(*ctrlproto.TerminatorUpdate)), nil
	})
}

// createTerminator answers a router's TerminatorCreate: the hosting identity is checked
// (see hostOf), and a terminator the router already has is updated rather than duplicated,
// so a router that creates its terminators again after a restart leaves one of each.
func (s *Service) createTerminator(router string, req *ctrlproto.TerminatorCreate) *ctrlproto.TerminatorCreateReply {
	failed := func(err error) *ctrlproto.TerminatorCreateReply {
		var ce *ctrlproto.Error
		if !errors.As(err, &ce) {
			ce = &ctrlproto.Error{Code: ctrlproto.ErrCodeInvalid, Message: err.Error()}
		}
		return &ctrlproto.TerminatorCreateReply{Outcome: ctrlproto.Failed(ce.Code, ce.Message)}
	}
	svc, err := s.service(&ctrlproto.CircuitRequest{ServiceID: req.Service})
	if err != nil {
		svc, err = s.service(&ctrlproto.CircuitRequest{ServiceName: req.Service})
	}
	if err != nil {
		return failed(fail(ctrlproto.ErrCodeServiceNotFound, "service %q not found", req.Service))
	}
	host, err := s.hostOf(router, svc, req.SessionToken)
	if err != nil {
		return failed(err)
	}
	terms, err := s.m.TerminatorsOf(svc.ID)
	if err != nil {
		return failed(err)
	}
	for _, t := range terms {
		if t.RouterID == router && t.Binding == req.Binding && t.Address == req.Address && t.Identity == req.Identity && t.HostID == host {
			if _, err := s.m.UpdateTerminator(t.ID, func(t *model.Terminator) error {
				t.Cost, t.Precedence = req.Cost, req.Precedence
				return nil
			}); err != nil {
				return failed(err)
			}
			return &ctrlproto.TerminatorCreateReply{TerminatorID: t.ID}
		}
	}
	t := &model.Terminator{ServiceID: svc.ID, RouterID: router, Binding: req.Binding, Address: req.Address,
		Identity: req.Identity, HostID: host, Cost: req.Cost, Precedence: req.Precedence}
	if err := s.m.CreateTerminator(t); err != nil {
		return failed(err)
	}
	return &ctrlproto.TerminatorCreateReply{TerminatorID: t.ID}
}

// hostOf returns the identity that hosts a terminator router asks for: with a session token,
// the identity of that Bind session of the service, which the edge router policies must let
// use this router for it; without, the router's own identity, which a Bind policy without
// posture checks must grant the service.
func (s *Service) hostOf(router string, svc *model.Service, token string) (string, error) {
	if token != "" {
		sess, err := s.m.DialSession(token, svc.ID, model.PolicyBind)
		if model.CodeOf(err) == model.CodeNotFound {
			return "", fail(ctrlproto.ErrCodeInvalidSession, "no bind session of service %q has this token", svc.Name)
		}
		if err != nil {
			return "", err
		}
		ok, err := s.m.EdgeRouterAllows(sess.IdentityID, router, svc.ID)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fail(ctrlproto.ErrCodeServiceNotFound, "no edge router policy lets identity %s use router %s for service %q", sess.IdentityID, router, svc.Name)
		}
		return sess.IdentityID, nil
	}
	ok, err := s.m.AllowedWithoutPosture(router, svc.ID, model.PolicyBind)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fail(ctrlproto.ErrCodeServiceNotFound, "no service policy without posture checks lets router identity %s bind service %q", router, svc.Name)
	}
	return router, nil
}

func (s *Service) removeTerminator(router string, req *ctrlproto.TerminatorRemove) *ctrlproto.TerminatorRemoveReply {
	terms, err := s.m.Terminators()
	if err != nil {
		return &ctrlproto.TerminatorRemoveReply{Outcome: ctrlproto.Failed(ctrlproto.ErrCodeInvalid, err.Error())}
	}
	for _, t := range terms {
		if t.RouterID != router {
			continue
		}
		if req.TerminatorID == t.ID || (req.TerminatorID == "" && t.Binding == req.Binding && t.Address == req.Address &&
			(t.ServiceID == req.Service || s.serviceNamed(t.ServiceID, req.Service))) {
			if err := s.m.DeleteTerminator(t.ID); err != nil {
				return &ctrlproto.TerminatorRemoveReply{Outcome: ctrlproto.Failed(ctrlproto.ErrCodeInvalid, err.Error())}
			}
			return &ctrlproto.TerminatorRemoveReply{}
		}
	}
	return &ctrlproto.TerminatorRemoveReply{Outcome: ctrlproto.Failed(ctrlproto.ErrCodeInvalid, "no such terminator of this router")}
}

// updateTerminator answers a router's TerminatorUpdate: one of its own terminators takes the
// cost and precedence asked for, validated as the management API validates them.
func (s *Service) updateTerminator(router string, req *ctrlproto.TerminatorUpdate) *ctrlproto.TerminatorUpdateReply {
	notOurs := errors.New("no terminator " + req.TerminatorID + " of this router")
	_, err := s.m.UpdateTerminator(req.TerminatorID, func(t *model.Terminator) error {
		if t.RouterID != router { // checked in the update's transaction: no other router's
			return notOurs
		}
		if req.Cost != nil {
			t.Cost = *req.Cost
		}
		if req.Precedence != "" {
			t.Precedence = req.Precedence
		}
		return nil
	})
	if model.CodeOf(err) == model.CodeNotFound {
		err = notOurs
	}
	if err != nil {
		return &ctrlproto.TerminatorUpdateReply{Outcome: ctrlproto.Failed(ctrlproto.ErrCodeInvalid, err.Error())}
	}
	return &ctrlproto.TerminatorUpdateReply{}
}

func (s *Service) serviceNamed(id, name string) bool {
	svc, err := s.m.Service(id)
	return err == nil && svc.Name == name
}

// PruneTerminators removes the terminators of bindings edge and tunnel that a router no
// longer hosts: those not in alive, the list of its Hello, and not made or renewed since the
// Hello (at since): the router may create them again as soon as it is answered.
func (s *Service) PruneTerminators(router string, alive []string, since time.Time) {
	terms, err := s.m.Terminators()
	if err != nil {
		s.log.Warn("cannot list terminators to prune", "router", router, "err", err)
		return
	}
	for _, t := range terms {
		if t.RouterID != router || (t.Binding != "edge" && t.Binding != "tunnel") || slices.Contains(alive, t.ID) || !t.UpdatedAt.Before(since) {
			continue
		}
		if err := s.m.DeleteTerminator(t.ID); err != nil && model.CodeOf(err) != model.CodeNotFound {
			s.log.Warn("cannot remove a terminator the router no longer hosts", "router", router, "terminator", t.ID, "err", err)
		}
	}
}
