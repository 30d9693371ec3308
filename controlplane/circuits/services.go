package circuits

import (
	"encoding/json"
	"fmt"

	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// tunnelServices answers a router's TunnelServices: the services the router's own identity
// may dial or bind, with their configs by type name. The list is answered again only when
// the model moved since the router's last answer.
func (s *Service) tunnelServices(router string, req *ctrlproto.TunnelServices) *ctrlproto.TunnelServicesReply {
	last := s.m.LastChange()
	if req.Since != 0 && req.Since == last {
		return &ctrlproto.TunnelServicesReply{LastChange: last, NotModified: true}
	}
	failed := func(err error) *ctrlproto.TunnelServicesReply {
		return &ctrlproto.TunnelServicesReply{Outcome: ctrlproto.Failed(ctrlproto.ErrCodeInvalid, err.Error())}
	}
	list, err := s.m.ServicesFor(router)
	if model.CodeOf(err) == model.CodeNotFound {
		return &ctrlproto.TunnelServicesReply{LastChange: last} // a router without an identity: no tunnel services
	}
	if err != nil {
		return failed(err)
	}
	types, err := s.m.ConfigTypes()
	if err != nil {
		return failed(err)
	}
	typeNames := map[string]string{}
	for _, t := range types {
		typeNames[t.ID] = t.Name
	}
	reply := &ctrlproto.TunnelServicesReply{LastChange: last, Services: make([]ctrlproto.TunnelService, 0, len(list))}
	for _, a := range list {
		ts := ctrlproto.TunnelService{ID: a.ID, Name: a.Name, EncryptionRequired: a.EncryptionRequired,
			OpenZitiEncryption: a.OpenZitiEncryption, Configs: map[string]json.RawMessage{}}
		if a.Dial {
			ts.Permissions = append(ts.Permissions, model.PolicyDial)
		}
		if a.Bind {
			ts.Permissions = append(ts.Permissions, model.PolicyBind)
		}
		for _, id := range a.Configs {
			c, err := s.m.Config(id)
			if err != nil {
				continue // deleted meanwhile
			}
			data, err := json.Marshal(c.Data)
			if err != nil {
				return failed(fmt.Errorf("config %s: %w", c.Name, err))
			}
			ts.Configs[typeNames[c.ConfigTypeID]] = data
		}
		reply.Services = append(reply.Services, ts)
	}
	return reply
}
