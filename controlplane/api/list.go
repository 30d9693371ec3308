package api

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/zmesh/zmesh/controlplane/filter"
)

// Paging bounds of list operations.
const (
	defaultLimit = 10
	maxLimit     = 500
)

// field is one filterable field of an entity type.
type field[T any] struct {
	name string
	kind filter.Kind
	get  func(T) filter.Value
}

func str[T any](name string, get func(T) string) field[T] {
	return field[T]{name, filter.KindString, func(v T) filter.Value { return filter.String(get(v)) }}
}

func boolean[T any](name string, get func(T) bool) field[T] {
	return field[T]{name, filter.KindBool, func(v T) filter.Value { return filter.Bool(get(v)) }}
}

func timeField[T any](name string, get func(T) time.Time) field[T] {
	return field[T]{name, filter.KindTime, func(v T) filter.Value { return filter.Time(get(v)) }}
}

func strs[T any](name string, get func(T) []string) field[T] {
	return field[T]{name, filter.KindStringList, func(v T) filter.Value { return filter.Strings(get(v)) }}
}

// record adapts an entity to the filter's view of it.
type record[T any] struct {
	v      T
	fields map[string]field[T]
}

func (r record[T]) Field(name string) (filter.Value, bool) {
	f, ok := r.fields[name]
	if !ok {
		return filter.Value{}, false
	}
	return f.get(r.v), true
}

type listParams struct {
	limit, offset int
}

// list writes one page of items; total counts every item that matched.
func (c *call) list(page []any, total int, p listParams) error {
	writeJSON(c.w, http.StatusOK, envelope{Data: page, Meta: Meta{Pagination: &Pagination{Limit: p.limit, Offset: p.offset, TotalCount: total}}})
	return nil
}

// listOf filters, sorts and pages items by the request's filter, limit and offset, and
// writes the page rendered by render.
func listOf[T any](c *call, items []T, fields []field[T], render func(T) any) error {
	byName := make(map[string]field[T], len(fields))
	schema := make(map[string]filter.Kind, len(fields))
	names := make([]string, 0, len(fields))
	for _, f := range fields {
		byName[f.name], schema[f.name] = f, f.kind
		names = append(names, f.name)
	}
	q, err := filter.Parse(c.r.URL.Query().Get("filter"))
	if err != nil {
		return newErr(codeInvalidFilter, "the filter is not valid: %v", err)
	}
	if err := q.Validate(schema); err != nil {
		return newErr(codeInvalidFilter, "the filter is not valid: %v", err)
	}
	p, err := pageParams(c, q)
	if err != nil {
		return err
	}
	matched := make([]record[T], 0, len(items))
	for _, it := range items {
		if r := (record[T]{it, byName}); q.Match(r) {
			matched = append(matched, r)
		}
	}
	slices.SortStableFunc(matched, func(a, b record[T]) int { return q.Compare(a, b) })
	page := []any{}
	for i := p.offset; i < len(matched) && len(page) < p.limit; i++ {
		page = append(page, render(matched[i].v))
	}
	slices.Sort(names)
	writeJSON(c.w, http.StatusOK, envelope{Data: page, Meta: Meta{
		Pagination:       &Pagination{Limit: p.limit, Offset: p.offset, TotalCount: len(matched)},
		FilterableFields: names,
	}})
	return nil
}

// pageParams reads limit and offset from the query string, falling back to the filter's
// limit and skip clauses and then to the defaults.
func pageParams(c *call, q *filter.Query) (listParams, error) {
	p := listParams{limit: defaultLimit}
	if q.Limit != nil {
		p.limit = *q.Limit
	}
	if q.Skip != nil {
		p.offset = *q.Skip
	}
	if q.LimitNone {
		p.limit = maxLimit
	}
	params := c.r.URL.Query()
	for _, f := range []struct {
		name string
		dst  *int
		min  int
		max  int
	}{{"limit", &p.limit, 1, maxLimit}, {"offset", &p.offset, 0, 1 << 31}} {
		text := params.Get(f.name)
		if text == "" {
			continue
		}
		n, err := strconv.Atoi(text)
		if err != nil {
			return p, fieldErr(f.name, text, "must be a whole number")
		}
		if n < f.min || n > f.max {
			return p, fieldErr(f.name, n, "must be %d to %d", f.min, f.max)
		}
		*f.dst = n
	}
	p.limit = min(max(p.limit, 1), maxLimit)
	return p, nil
}

func number[T any](name string, get func(T) float64) field[T] {
	return field[T]{name, filter.KindNumber, func(v T) filter.Value { return filter.Number(get(v)) }}
}

// nameLookup gives the name of an entity by id to the related fields of one request's
// filter (service.name, identity.name), asking get once per id; an entity that is gone, or
// that cannot be read, has the name "" and so matches no name.
func nameLookup(get func(id string) (string, error)) func(string) string {
	cache := map[string]string{}
	return func(id string) string {
		name, ok := cache[id]
		if !ok {
			name, _ = get(id)
			cache[id] = name
		}
		return name
	}
}

func (s *Server) identityNames() func(string) string {
	return nameLookup(func(id string) (string, error) {
		i, err := s.m.Identity(id)
		if err != nil {
			return "", err
		}
		return i.Name, nil
	})
}

func (s *Server) serviceNames() func(string) string {
	return nameLookup(func(id string) (string, error) {
		sv, err := s.m.Service(id)
		if err != nil {
			return "", err
		}
		return sv.Name, nil
	})
}

func (s *Server) routerNames() func(string) string {
	return nameLookup(func(id string) (string, error) {
		r, err := s.m.EdgeRouter(id)
		if err != nil {
			return "", err
		}
		return r.Name, nil
	})
}
