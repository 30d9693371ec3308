package model

import (
	"errors"
	"fmt"
	"slices"

	"github.com/zmesh/zmesh/controlplane/store"
)

// IdentityServiceConfigs are the configs an identity uses for services in place of the
// services' own, one per service and config type. The record's id is the identity's.
type IdentityServiceConfigs struct {
	IdentityID string `json:"id"`
	// Configs maps a service id to config type ids to config ids.
	Configs map[string]map[string]string `json:"configs"`
}

// ServiceConfig pairs a service with a config.
type ServiceConfig struct {
	ServiceID, ConfigID string
}

// ServiceConfigsOf returns the identity's service configs, ordered by service then config id.
// Pairs whose service or config was deleted are left out.
func (m *Model) ServiceConfigsOf(identityID string) ([]ServiceConfig, error) {
	var out []ServiceConfig
	err := m.st.View(func(tx *store.Tx) error {
		if _, err := m.c.identities.Get(tx, identityID); err != nil {
			return missing(err, "identity", identityID)
		}
		overrides, err := m.serviceConfigOverrides(tx, identityID)
		if err != nil {
			return err
		}
		for svc, types := range overrides {
			for _, cfg := range types {
				out = append(out, ServiceConfig{ServiceID: svc, ConfigID: cfg})
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b ServiceConfig) int {
		if c := compareStr(a.ServiceID, b.ServiceID); c != 0 {
			return c
		}
		return compareStr(a.ConfigID, b.ConfigID)
	})
	return out, err
}

// ServiceConfigOverrides returns the identity's service configs as service id → config type
// id → config id, leaving out those whose service or config was deleted.
func (m *Model) ServiceConfigOverrides(identityID string) (map[string]map[string]string, error) {
	var out map[string]map[string]string
	err := m.st.View(func(tx *store.Tx) (err error) {
		out, err = m.serviceConfigOverrides(tx, identityID)
		return err
	})
	return out, err
}

func (m *Model) serviceConfigOverrides(tx *store.Tx, identityID string) (map[string]map[string]string, error) {
	rec, err := m.c.identityServiceConfigs.Get(tx, identityID)
	if errors.Is(err, store.ErrNotFound) {
		return map[string]map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for svc, types := range rec.Configs {
		if ok, err := m.c.services.Has(tx, svc); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		for typ, cfg := range types {
			if ok, err := m.c.configs.Has(tx, cfg); err != nil || !ok {
				if err != nil {
					return nil, err
				}
				continue
			}
			if out[svc] == nil {
				out[svc] = map[string]string{}
			}
			out[svc][typ] = cfg
		}
	}
	return out, nil
}

// AssignServiceConfigs makes the identity use each config for its service, in place of the
// config of the same type it used before for that service (the service's own or an earlier
// assignment).
func (m *Model) AssignServiceConfigs(identityID string, pairs []ServiceConfig) error {
	return m.changeServiceConfigs(identityID, pairs, func(rec *IdentityServiceConfigs, p ServiceConfig, typ string) {
		if rec.Configs[p.ServiceID] == nil {
			rec.Configs[p.ServiceID] = map[string]string{}
		}
		rec.Configs[p.ServiceID][typ] = p.ConfigID
	})
}

// RemoveServiceConfigs ends the identity's use of each pair; with no pairs, of all of them.
func (m *Model) RemoveServiceConfigs(identityID string, pairs []ServiceConfig) error {
	if len(pairs) == 0 {
		return m.st.Update(func(tx *store.Tx) error {
			if _, err := m.c.identities.Get(tx, identityID); err != nil {
				return missing(err, "identity", identityID)
			}
			if ok, err := m.c.identityServiceConfigs.Has(tx, identityID); err != nil || !ok {
				return err
			}
			m.clientDataChanged(tx)
			return m.c.identityServiceConfigs.Delete(tx, identityID)
		})
	}
	return m.changeServiceConfigs(identityID, pairs, func(rec *IdentityServiceConfigs, p ServiceConfig, typ string) {
		if rec.Configs[p.ServiceID][typ] == p.ConfigID {
			delete(rec.Configs[p.ServiceID], typ)
			if len(rec.Configs[p.ServiceID]) == 0 {
				delete(rec.Configs, p.ServiceID)
			}
		}
	})
}

// changeServiceConfigs checks every pair names an existing service and config, then applies
// change to the identity's record for each, in one transaction.
func (m *Model) changeServiceConfigs(identityID string, pairs []ServiceConfig, change func(*IdentityServiceConfigs, ServiceConfig, string)) error {
	return m.st.Update(func(tx *store.Tx) error {
		if _, err := m.c.identities.Get(tx, identityID); err != nil {
			return missing(err, "identity", identityID)
		}
		rec, err := m.c.identityServiceConfigs.Get(tx, identityID)
		if errors.Is(err, store.ErrNotFound) {
			rec, err = &IdentityServiceConfigs{IdentityID: identityID}, nil
		}
		if err != nil {
			return err
		}
		if rec.Configs == nil {
			rec.Configs = map[string]map[string]string{}
		}
		for i, p := range pairs {
			if ok, err := m.c.services.Has(tx, p.ServiceID); err != nil || !ok {
				if err != nil {
					return err
				}
				return invalid(fmt.Sprintf("[%d].serviceId", i), p.ServiceID, "no service with this id")
			}
			cfg, err := m.c.configs.Get(tx, p.ConfigID)
			if errors.Is(err, store.ErrNotFound) {
				return invalid(fmt.Sprintf("[%d].configId", i), p.ConfigID, "no config with this id")
			}
			if err != nil {
				return err
			}
			change(rec, p, cfg.ConfigTypeID)
		}
		m.clientDataChanged(tx)
		if len(rec.Configs) == 0 {
			if ok, err := m.c.identityServiceConfigs.Has(tx, identityID); err != nil || !ok {
				return err
			}
			return m.c.identityServiceConfigs.Delete(tx, identityID)
		}
		return m.c.identityServiceConfigs.Put(tx, rec)
	})
}
