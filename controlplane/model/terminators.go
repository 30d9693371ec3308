package model

import (
	"errors"
	"fmt"

	"github.com/zmesh/zmesh/controlplane/store"
)

// Terminator precedences: how a terminator ranks against the others of its service.
const (
	PrecedenceDefault  = "default"
	PrecedenceRequired = "required"
	PrecedenceFailed   = "failed"
)

// MaxTerminatorCost bounds a terminator's cost.
const MaxTerminatorCost = 65535

// Terminator is where a service leaves the network: on router, the address a dialer of the
// binding connects to (proxy: host:port; transport: tls:host:port), or the hosting SDK or
// tunnel named by identity.
type Terminator struct {
	Base
	ServiceID string `json:"serviceId"`
	RouterID  string `json:"routerId"`
	Binding   string `json:"binding"`
	Address   string `json:"address"`
	Identity  string `json:"identity,omitempty"`
	// HostID is the identity hosting the terminator when a router created it: the router's
	// own identity, or the identity whose Bind session the router presented.
	HostID         string `json:"hostId,omitempty"`
	IdentitySecret []byte `json:"identitySecret,omitempty"`
	Cost           int    `json:"cost"`
	Precedence     string `json:"precedence"`
}

// EndToEndCapable tells whether a terminator of this binding can take part in end-to-end
// encryption: those of SDKs (edge) and host-mode tunnels (tunnel) can; a router's proxy and
// transport dialers, which hand plain bytes to the service, cannot.
func EndToEndCapable(binding string) bool {
	switch binding {
	case "proxy", "proxy_udp", "transport", "transport_udp":
		return false
	}
	return true
}

func checkBinding(b string) error {
	if b == "" {
		return invalid("binding", b, "is required, e.g. transport, edge or tunnel")
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return invalid("binding", b, "may hold letters, digits, '_' and '-' only")
		}
	}
	return nil
}

func (m *Model) terminatorKind() kind[Terminator, *Terminator] {
	return kind[Terminator, *Terminator]{
		name: "terminator", coll: m.c.terminators, policyNeutral: true,
		check: func(tx *store.Tx, t *Terminator) error {
			if err := m.mustExist(tx, m.c.services.Has, "service", t.ServiceID); err != nil {
				return err
			}
			if err := m.mustExist(tx, m.c.edgeRouters.Has, "router", t.RouterID); err != nil {
				return err
			}
			if err := checkBinding(t.Binding); err != nil {
				return err
			}
			if svc, err := m.c.services.Get(tx, t.ServiceID); err != nil {
				return fmt.Errorf("look up service %q: %w", t.ServiceID, err)
			} else if svc.EncryptionRequired && !EndToEndCapable(t.Binding) {
				return invalid("binding", t.Binding, "cannot end circuits of service %q, which requires end-to-end encryption: "+
					"a router's %s dialer cannot take part in it; host the service with an SDK or a host-mode tunnel, "+
					"or create the service with encryptionRequired false", svc.Name, t.Binding)
			}
			if t.Address == "" {
				return invalid("address", t.Address, "is required")
			}
			if len(t.Address) > 1024 {
				return invalid("address", t.Address, "is longer than 1024 bytes")
			}
			if t.Cost < 0 || t.Cost > MaxTerminatorCost {
				return invalid("cost", t.Cost, "must be 0 to %d", MaxTerminatorCost)
			}
			switch t.Precedence {
			case "":
				t.Precedence = PrecedenceDefault
			case PrecedenceDefault, PrecedenceRequired, PrecedenceFailed:
			default:
				return invalid("precedence", t.Precedence, "allowed: default, required, failed")
			}
			return nil
		},
	}
}

// mustExist checks that the entity a field names exists.
func (m *Model) mustExist(tx *store.Tx, has func(*store.Tx, string) (bool, error), field, id string) error {
	if id == "" {
		return invalid(field, id, "is required")
	}
	ok, err := has(tx, id)
	if err != nil {
		return fmt.Errorf("look up %s %q: %w", field, id, err)
	}
	if !ok {
		return invalid(field, id, "no %s with this id", field)
	}
	return nil
}

// CRUD of terminators.

func (m *Model) CreateTerminator(t *Terminator) error { return createEntity(m, m.terminatorKind(), t) }
func (m *Model) Terminator(id string) (*Terminator, error) {
	return getEntity(m, m.terminatorKind(), id)
}
func (m *Model) Terminators() ([]*Terminator, error) { return allEntities(m, m.terminatorKind()) }
func (m *Model) UpdateTerminator(id string, f func(*Terminator) error) (*Terminator, error) {
	return updateEntity(m, m.terminatorKind(), id, f)
}
func (m *Model) DeleteTerminator(id string) error { return deleteEntity(m, m.terminatorKind(), id) }

// TerminatorsOf returns the terminators of a service.
func (m *Model) TerminatorsOf(serviceID string) ([]*Terminator, error) {
	var out []*Terminator
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.c.terminators.With(tx, "serviceId", serviceID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
	return out, err
}
