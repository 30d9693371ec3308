package api

import (
	"net/http"
)

// body is a decoded create/update/patch request body of one entity type: pointer fields tell
// absent from zero. required checks the fields a create or a replace must carry; apply copies
// the fields present onto the entity.
type body[P any] interface {
	required() error
	apply(P) error
}

// resource describes the management operations of one entity type.
type resource[P any] struct {
	path    string // collection path, e.g. /services
	entity  string // entity name in links, e.g. services
	what    string // for summaries, e.g. "service"
	fields  []field[P]
	render  func(*call, P) any
	newBody func() body[P]
	newRec  func() P
	// reset clears, in place, what a replace (PUT) does not keep of the current record.
	reset  func(cur P)
	id     func(P) string
	create func(P) error
	get    func(id string) (P, error)
	all    func() ([]P, error)
	update func(id string, change func(P) error) (P, error)
	remove func(id string) error
	// roles, when set, gives an entity's role attributes: the list takes roleFilter and
	// roleSemantic.
	roles func(P) []string
	// list, when set, serves the list instead of the generic one.
	list func(*call) error
}

// registerCRUD adds list, create, get, replace, patch and delete of a resource.
func registerCRUD[P any](s *Server, apis apiSet, acc access, r resource[P]) {
	s.handle(apis, "GET", r.path, acc, "Lists "+r.what+"s", func(c *call) error {
		if r.list != nil {
			return r.list(c)
		}
		if err := refuseAsIdentity(c); err != nil {
			return err
		}
		list, err := r.all()
		if err != nil {
			return err
		}
		if list, err = byRoles(c, list, r.id, r.roles); err != nil {
			return err
		}
		return listOf(c, list, r.fields, func(p P) any { return r.render(c, p) })
	})
	s.handleCreate(apis, r.path, acc, "Creates a "+r.what, func(c *call) error {
		b := r.newBody()
		if err := decodeJSON(c.w, c.r, b); err != nil {
			return err
		}
		if err := b.required(); err != nil {
			return err
		}
		rec := r.newRec()
		if err := b.apply(rec); err != nil {
			return err
		}
		if err := r.create(rec); err != nil {
			return err
		}
		return c.created(r.entity, r.id(rec))
	})
	s.handle(apis, "GET", r.path+"/{id}", acc, "Returns a "+r.what, func(c *call) error {
		rec, err := r.get(c.path("id"))
		if err != nil {
			return err
		}
		return c.data(http.StatusOK, r.render(c, rec))
	})
	change := func(replace bool) func(c *call) error {
		return func(c *call) error {
			b := r.newBody()
			if err := decodeJSON(c.w, c.r, b); err != nil {
				return err
			}
			if replace {
				if err := b.required(); err != nil {
					return err
				}
			}
			_, err := r.update(c.path("id"), func(cur P) error {
				if replace {
					r.reset(cur)
				}
				return b.apply(cur)
			})
			if err != nil {
				return err
			}
			return c.empty()
		}
	}
	s.handle(apis, "PUT", r.path+"/{id}", acc, "Replaces a "+r.what, change(true))
	s.handle(apis, "PATCH", r.path+"/{id}", acc, "Changes some fields of a "+r.what, change(false))
	s.handle(apis, "DELETE", r.path+"/{id}", acc, "Deletes a "+r.what, func(c *call) error {
		if err := r.remove(c.path("id")); err != nil {
			return err
		}
		return c.empty()
	})
}
