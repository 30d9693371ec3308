package model

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/zmesh/zmesh/controlplane/store"
)

// ConfigType names a kind of service configuration and the JSON schema its configs follow.
type ConfigType struct {
	Base
	Name   string         `json:"name"`
	Schema map[string]any `json:"schema"`
	// Builtin types are created on first start and cannot change or be deleted.
	Builtin bool `json:"builtin,omitempty"`
}

// Config is one configuration of a config type, attached to services.
type Config struct {
	Base
	Name         string `json:"name"`
	ConfigTypeID string `json:"configTypeId"`
	Data         any    `json:"data"`
}

//go:embed configtypes/*.json
var builtinSchemas embed.FS

// BuiltinConfigTypes are the config types every network has, by name; their ids are their
// names.
func BuiltinConfigTypes() []string { return []string{"intercept.v1", "host.v1", "host.v2", "proxy.v1"} }

// EnsureBuiltinConfigTypes creates the built-in config types that are missing.
func (m *Model) EnsureBuiltinConfigTypes() error {
	return m.st.Update(func(tx *store.Tx) error {
		for _, name := range BuiltinConfigTypes() {
			if ok, err := m.c.configTypes.Has(tx, name); err != nil || ok {
				if err != nil {
					return err
				}
				continue
			}
			data, err := builtinSchemas.ReadFile("configtypes/" + name + ".json")
			if err != nil {
				return err
			}
			var schema map[string]any
			if err := json.Unmarshal(data, &schema); err != nil {
				return fmt.Errorf("built-in schema %s: %w", name, err)
			}
			ct := &ConfigType{Base: m.newBase(nil), Name: name, Schema: schema, Builtin: true}
			ct.ID = name
			if err := m.c.configTypes.Create(tx, ct); err != nil {
				return conflict(err)
			}
		}
		return nil
	})
}

// schemaCache holds compiled schemas by config type id and update time.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]compiled
}

type compiled struct {
	version int64
	schema  *jsonschema.Schema
}

// noLoader refuses every $ref outside the schema itself: schemas never read files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schemas may not reference %s", url)
}

// compileSchema compiles a config type's schema (JSON Schema draft 7, formats asserted).
func compileSchema(schema map[string]any) (*jsonschema.Schema, error) {
	if schema == nil {
		return nil, errors.New("is required: a JSON schema object")
	}
	// Round-trip through the library's decoder so numbers keep their precision.
	data, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	const loc = "mem://config-type.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

func (m *Model) schemaOf(ct *ConfigType) (*jsonschema.Schema, error) {
	m.schemas.mu.Lock()
	defer m.schemas.mu.Unlock()
	if c, ok := m.schemas.m[ct.ID]; ok && c.version == ct.UpdatedAt.UnixNano() {
		return c.schema, nil
	}
	s, err := compileSchema(ct.Schema)
	if err != nil {
		return nil, err
	}
	if m.schemas.m == nil {
		m.schemas.m = map[string]compiled{}
	}
	m.schemas.m[ct.ID] = compiled{version: ct.UpdatedAt.UnixNano(), schema: s}
	return s, nil
}

// validateData checks config data against its type's schema; the error names the failing
// field as data.<path>.
func (m *Model) validateData(ct *ConfigType, data any) error {
	s, err := m.schemaOf(ct)
	if err != nil {
		return fmt.Errorf("config type %s: %w", ct.Name, err)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return invalid("data", nil, "is not JSON: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return invalid("data", nil, "is not JSON: %v", err)
	}
	err = s.Validate(inst)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		leaf := ve
		for len(leaf.Causes) > 0 {
			leaf = leaf.Causes[0]
		}
		field := strings.Join(append([]string{"data"}, leaf.InstanceLocation...), ".")
		msg := leaf.Error()
		if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "at ") {
			msg = msg[i+2:]
		}
		return invalid(field, nil, "does not follow the schema of %s: %s", ct.Name, msg)
	}
	return err
}

func (m *Model) configTypeKind() kind[ConfigType, *ConfigType] {
	return kind[ConfigType, *ConfigType]{
		name: "config type", coll: m.c.configTypes,
		check: func(tx *store.Tx, ct *ConfigType) error {
			if err := checkName("name", ct.Name); err != nil {
				return err
			}
			if _, err := compileSchema(ct.Schema); err != nil {
				return invalid("schema", nil, "is not a valid JSON schema: %v", err)
			}
			return nil
		},
		referenced: func(tx *store.Tx, id string) error {
			if ct, err := m.c.configTypes.Get(tx, id); err == nil && ct.Builtin {
				return errorf(CodeCanNotDeleteReferenced, "config type %s is built in", ct.Name)
			}
			ids, err := m.c.configs.IDsWith(tx, "configTypeId", id)
			if err != nil {
				return err
			}
			if len(ids) > 0 {
				return errorf(CodeCanNotDeleteReferenced, "config type %q is used by %d configs, e.g. %s", id, len(ids), ids[0])
			}
			return nil
		},
	}
}

func (m *Model) configKind() kind[Config, *Config] {
	return kind[Config, *Config]{
		name: "config", coll: m.c.configs,
		check: func(tx *store.Tx, c *Config) error {
			if err := checkName("name", c.Name); err != nil {
				return err
			}
			ct, err := m.c.configTypes.Get(tx, c.ConfigTypeID)
			if err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return invalid("configTypeId", c.ConfigTypeID, "no config type with this id")
				}
				return err
			}
			return m.validateData(ct, c.Data)
		},
		referenced: func(tx *store.Tx, id string) error {
			var users []string
			err := m.c.services.Each(tx, func(s *Service) error {
				if slices.Contains(s.Configs, id) {
					users = append(users, s.Name)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if len(users) > 0 {
				return errorf(CodeCanNotDeleteReferenced, "config %q is used by services %s", id, strings.Join(users, ", "))
			}
			return nil
		},
	}
}

// checkServiceConfigs checks that a service's configs exist and that no two share a type.
func (m *Model) checkServiceConfigs(tx *store.Tx, s *Service) error {
	types := map[string]string{}
	for i, id := range s.Configs {
		c, err := m.c.configs.Get(tx, id)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return invalid(fmt.Sprintf("configs[%d]", i), id, "no config with this id")
			}
			return err
		}
		if other, dup := types[c.ConfigTypeID]; dup {
			return invalid(fmt.Sprintf("configs[%d]", i), id, "has config type %s, like config %s; a service has one config per type", c.ConfigTypeID, other)
		}
		types[c.ConfigTypeID] = id
	}
	return nil
}

func (m *Model) CreateConfigType(ct *ConfigType) error {
	return createEntity(m, m.configTypeKind(), ct)
}
func (m *Model) ConfigType(id string) (*ConfigType, error) {
	return getEntity(m, m.configTypeKind(), id)
}
func (m *Model) ConfigTypes() ([]*ConfigType, error) { return allEntities(m, m.configTypeKind()) }
func (m *Model) UpdateConfigType(id string, f func(*ConfigType) error) (*ConfigType, error) {
	return updateEntity(m, m.configTypeKind(), id, func(ct *ConfigType) error {
		if ct.Builtin {
			return errorf(CodeCouldNotValidate, "config type %s is built in and cannot change", ct.Name)
		}
		return f(ct)
	})
}
func (m *Model) DeleteConfigType(id string) error { return deleteEntity(m, m.configTypeKind(), id) }

func (m *Model) CreateConfig(c *Config) error      { return createEntity(m, m.configKind(), c) }
func (m *Model) Config(id string) (*Config, error) { return getEntity(m, m.configKind(), id) }
func (m *Model) Configs() ([]*Config, error)       { return allEntities(m, m.configKind()) }
func (m *Model) DeleteConfig(id string) error      { return deleteEntity(m, m.configKind(), id) }
func (m *Model) UpdateConfig(id string, f func(*Config) error) (*Config, error) {
	return updateEntity(m, m.configKind(), id, func(c *Config) error {
		typ := c.ConfigTypeID
		if err := f(c); err != nil {
			return err
		}
		if c.ConfigTypeID != typ {
			return invalid("configTypeId", c.ConfigTypeID, "cannot change; create a new config")
		}
		return nil
	})
}
