package circuits

import (
	"context"
	"fmt"

	"github.com/zmesh/zmesh/controlplane/channel"
	"github.com/zmesh/zmesh/controlplane/model"
)

// Register installs the handlers of a router's circuit, link and terminator messages on its
// control channel.
func (s *Service) Register(router string, ch *channel.Channel, mesh *Mesh) {
	ch.HandleAsync(channel.TypeCircuitRequest, func(ctx context.Context, msg channel.Message) (channel.Message, error) {
		return s.Create(ctx, router, msg.(*channel.CircuitRequest)), nil
	})
	ch.HandleAsync(channel.TypeFault, func(_ context.Context, msg channel.Message) (channel.Message, error) {
		s.Fault(router, msg.(*channel.Fault))
		return nil, nil
	})
	ch.Handle(channel.TypeIdleCircuitsCheck, func(_ context.Context, msg channel.Message) (channel.Message, error) {
		return &channel.IdleCircuitsReply{Valid: s.Valid(msg.(*channel.IdleCircuitsCheck).CircuitIDs)}, nil
	})
	ch.Handle(channel.TypeLinkState, func(_ context.Context, msg channel.Message) (channel.Message, error) {
		mesh.LinkState(router, msg.(*channel.LinkState))
		return nil, nil
	})
	ch.HandleAsync(channel.TypeTerminatorCreate, func(_ context.Context, msg channel.Message) (channel.Message, error) {
		return s.createTerminator(router, msg.(*channel.TerminatorCreate)), nil
	})
	ch.HandleAsync(channel.TypeTerminatorRemove, func(_ context.Context, msg channel.Message) (channel.Message, error) {
		return s.removeTerminator(router, msg.(*channel.TerminatorRemove)), nil
	})
}

func (s *Service) createTerminator(router string, req *channel.TerminatorCreate) *channel.TerminatorCreateReply {
	svc, err := s.service(&channel.CircuitRequest{ServiceID: req.Service})
	if err != nil {
		svc, err = s.service(&channel.CircuitRequest{ServiceName: req.Service})
	}
	if err != nil {
		return &channel.TerminatorCreateReply{Outcome: channel.Failed(channel.ErrCodeServiceNotFound, fmt.Sprintf("service %q not found", req.Service))}
	}
	t := &model.Terminator{ServiceID: svc.ID, RouterID: router, Binding: req.Binding, Address: req.Address,
		Identity: req.Identity, Cost: req.Cost, Precedence: req.Precedence}
	if err := s.m.CreateTerminator(t); err != nil {
		return &channel.TerminatorCreateReply{Outcome: channel.Failed(channel.ErrCodeInvalid, err.Error())}
	}
	return &channel.TerminatorCreateReply{TerminatorID: t.ID}
}

func (s *Service) removeTerminator(router string, req *channel.TerminatorRemove) *channel.TerminatorRemoveReply {
	terms, err := s.m.Terminators()
	if err != nil {
		return &channel.TerminatorRemoveReply{Outcome: channel.Failed(channel.ErrCodeInvalid, err.Error())}
	}
	for _, t := range terms {
		if t.RouterID != router {
			continue
		}
		if req.TerminatorID == t.ID || (req.TerminatorID == "" && t.Binding == req.Binding && t.Address == req.Address &&
			(t.ServiceID == req.Service || s.serviceNamed(t.ServiceID, req.Service))) {
			if err := s.m.DeleteTerminator(t.ID); err != nil {
				return &channel.TerminatorRemoveReply{Outcome: channel.Failed(channel.ErrCodeInvalid, err.Error())}
			}
			return &channel.TerminatorRemoveReply{}
		}
	}
	return &channel.TerminatorRemoveReply{Outcome: channel.Failed(channel.ErrCodeInvalid, "no such terminator of this router")}
}

func (s *Service) serviceNamed(id, name string) bool {
	svc, err := s.m.Service(id)
	return err == nil && svc.Name == name
}
