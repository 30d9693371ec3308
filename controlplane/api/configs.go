package api

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

type configTypeBody struct {
	Name   *string         `json:"name"`
	Schema *map[string]any `json:"schema"`
	Tags   *model.Tags     `json:"tags"`
}

func (b *configTypeBody) required() error { return required(req("name", b.Name != nil)) }

func (b *configTypeBody) apply(ct *model.ConfigType) error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	set(&ct.Name, b.Name)
	set(&ct.Schema, b.Schema)
	set(&ct.Tags, b.Tags)
	if ct.Schema == nil {
		ct.Schema = map[string]any{}
	}
	return nil
}

func (s *Server) configTypeResource() resource[*model.ConfigType] {
	type v = *model.ConfigType
	return resource[v]{
		path: "/config-types", entity: "config-types", what: "config type",
		fields: []field[v]{
			str("id", func(x v) string { return x.ID }), str("name", func(x v) string { return x.Name }),
			timeField("createdAt", func(x v) time.Time { return x.CreatedAt }),
		},
		render: func(_ *call, x v) any {
			return map[string]any{"id": x.ID, "_links": links("config-types", x.ID), "createdAt": x.CreatedAt,
				"updatedAt": x.UpdatedAt, "tags": tagsOf(x.Tags), "name": x.Name, "schema": x.Schema}
		},
		newBody: func() body[v] { return new(configTypeBody) },
		newRec:  func() v { return new(model.ConfigType) },
		reset:   func(x v) { *x = model.ConfigType{Base: x.Base, Builtin: x.Builtin}; x.Tags = nil },
		id:      func(x v) string { return x.ID },
		create:  s.m.CreateConfigType, get: s.m.ConfigType, all: s.m.ConfigTypes,
		update: s.m.UpdateConfigType, remove: s.m.DeleteConfigType,
	}
}

type configBody struct {
	Name         *string         `json:"name"`
	ConfigTypeID *string         `json:"configTypeId"`
	Data         json.RawMessage `json:"data"`
	Tags         *model.Tags     `json:"tags"`
}

func (b *configBody) required() error {
	return required(req("name", b.Name != nil), req("configTypeId", b.ConfigTypeID != nil), req("data", b.Data != nil))
}

func (b *configBody) apply(c *model.Config) error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	if b.Data != nil {
		var data any
		if err := json.Unmarshal(b.Data, &data); err != nil {
			return fieldErr("data", nil, "is not JSON: %v", err)
		}
		if _, ok := data.(map[string]any); !ok {
			return fieldErr("data", nil, "must be a JSON object")
		}
		c.Data = data
	}
	set(&c.Name, b.Name)
	set(&c.ConfigTypeID, b.ConfigTypeID)
	set(&c.Tags, b.Tags)
	return nil
}

func (s *Server) configResource() resource[*model.Config] {
	type v = *model.Config
	return resource[v]{
		path: "/configs", entity: "configs", what: "config",
		fields: []field[v]{
			str("id", func(x v) string { return x.ID }), str("name", func(x v) string { return x.Name }),
			str("configTypeId", func(x v) string { return x.ConfigTypeID }),
			timeField("createdAt", func(x v) time.Time { return x.CreatedAt }),
		},
		render: func(_ *call, x v) any {
			name := x.ConfigTypeID
			if ct, err := s.m.ConfigType(x.ConfigTypeID); err == nil {
				name = ct.Name
			}
			return map[string]any{"id": x.ID, "_links": links("configs", x.ID), "createdAt": x.CreatedAt,
				"updatedAt": x.UpdatedAt, "tags": tagsOf(x.Tags), "name": x.Name, "configTypeId": x.ConfigTypeID,
				"configType": ref("config-types", x.ConfigTypeID, name), "data": x.Data}
		},
		newBody: func() body[v] { return new(configBody) },
		newRec:  func() v { return new(model.Config) },
		reset:   func(x v) { *x = model.Config{Base: x.Base, ConfigTypeID: x.ConfigTypeID}; x.Tags = nil },
		id:      func(x v) string { return x.ID },
		create:  s.m.CreateConfig, get: s.m.Config, all: s.m.Configs,
		update: s.m.UpdateConfig, remove: s.m.DeleteConfig,
	}
}

// wantedConfigTypes returns the config types whose configs a client wants embedded in
// services: those of the configTypes query parameters, else those named when the API session
// was created. "all" selects every type. Types are named by id or name.
func (s *Server) wantedConfigTypes(c *call) (map[string]string, error) {
	names := c.r.URL.Query()["configTypes"]
	if len(names) == 0 && c.session != nil {
		names = c.session.ConfigTypes
	}
	if len(names) == 0 {
		return nil, nil
	}
	types, err := s.m.ConfigTypes()
	if err != nil {
		return nil, err
	}
	want := map[string]string{} // type id -> name
	for _, n := range names {
		for _, part := range strings.Split(n, ",") {
			for _, t := range types {
				if part == "all" || part == t.ID || part == t.Name {
					want[t.ID] = t.Name
				}
			}
		}
	}
	return want, nil
}

// embedConfigs fills a rendered service's config map with the wanted configs: of each type,
// the identity's own config for the service (overrides: config type id → config id) in place
// of the service's.
func (s *Server) embedConfigs(out map[string]any, sv *model.Service, want, overrides map[string]string) {
	if len(want) == 0 {
		return
	}
	cfg := map[string]any{}
	for _, id := range sv.Configs {
		c, err := s.m.Config(id)
		if err != nil {
			continue
		}
		if _, own := overrides[c.ConfigTypeID]; own {
			continue
		}
		if name, ok := want[c.ConfigTypeID]; ok {
			cfg[name] = c.Data
		}
	}
	for typ, id := range overrides {
		name, ok := want[typ]
		if !ok {
			continue
		}
		if c, err := s.m.Config(id); err == nil {
			cfg[name] = c.Data
		}
	}
	out["config"] = cfg
}
