package api

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

// registerPosture adds the management operations on posture checks and their types, and the
// client operations that report posture.
func (s *Server) registerPosture() {
	registerCRUD(s, management, adminOnly, s.postureCheckResource())
	s.handle(management, "GET", "/posture-check-types", adminOnly, "Lists posture check types", s.listPostureCheckTypes)
	s.handle(management, "GET", "/posture-check-types/{id}", adminOnly, "Returns a posture check type", s.getPostureCheckType)
	s.handleCreate(client, "/posture-response", session, "Submits a posture response", s.postureResponse)
	s.handle(client, "POST", "/posture-response-bulk", session, "Submits several posture responses", s.postureResponseBulk)
}

// postureCheckBody is a posture check create, update or patch: the common fields and those
// of every type. The model refuses a field of another type than the check's, and a change of
// type.
type postureCheckBody struct {
	Name                  *string                  `json:"name"`
	TypeID                *string                  `json:"typeId"`
	RoleAttributes        *[]string                `json:"roleAttributes"`
	Tags                  *model.Tags              `json:"tags"`
	Domains               *[]string                `json:"domains"`
	MacAddresses          *[]string                `json:"macAddresses"`
	OperatingSystems      *[]model.OperatingSystem `json:"operatingSystems"`
	Process               *model.Process           `json:"process"`
	Semantic              *string                  `json:"semantic"`
	Processes             *[]model.ProcessMulti    `json:"processes"`
	TimeoutSeconds        *int64                   `json:"timeoutSeconds"`
	PromptOnWake          *bool                    `json:"promptOnWake"`
	PromptOnUnlock        *bool                    `json:"promptOnUnlock"`
	IgnoreLegacyEndpoints *bool                    `json:"ignoreLegacyEndpoints"`
}

func (b *postureCheckBody) required() error {
	return required(req("name", b.Name != nil), req("typeId", b.TypeID != nil))
}

func (b *postureCheckBody) apply(c *model.PostureCheck) error {
	if b.Tags != nil {
		if err := checkTags("tags", *b.Tags); err != nil {
			return err
		}
	}
	set(&c.Name, b.Name)
	set(&c.TypeID, b.TypeID)
	set(&c.RoleAttributes, b.RoleAttributes)
	set(&c.Tags, b.Tags)
	set(&c.Domains, b.Domains)
	set(&c.MacAddresses, b.MacAddresses)
	set(&c.OperatingSystems, b.OperatingSystems)
	if b.Process != nil {
		c.Process = b.Process
	}
	set(&c.Semantic, b.Semantic)
	set(&c.Processes, b.Processes)
	set(&c.TimeoutSeconds, b.TimeoutSeconds)
	set(&c.PromptOnWake, b.PromptOnWake)
	set(&c.PromptOnUnlock, b.PromptOnUnlock)
	set(&c.IgnoreLegacyEndpoints, b.IgnoreLegacyEndpoints)
	return nil
}

func renderOperatingSystems(list []model.OperatingSystem) []any {
	out := make([]any, 0, len(list))
	for _, o := range list {
		out = append(out, map[string]any{"type": o.Type, "versions": nonNil(o.Versions)})
	}
	return out
}

func renderPostureCheck(c *model.PostureCheck) map[string]any {
	out := map[string]any{
		"id": c.ID, "_links": links("posture-checks", c.ID), "createdAt": c.CreatedAt, "updatedAt": c.UpdatedAt,
		"tags": tagsOf(c.Tags), "name": c.Name, "typeId": c.TypeID, "roleAttributes": nonNil(c.RoleAttributes),
		"version": c.Version,
	}
	switch c.TypeID {
	case model.PostureDomain:
		out["domains"] = nonNil(c.Domains)
	case model.PostureMAC:
		out["macAddresses"] = nonNil(c.MacAddresses)
	case model.PostureOS:
		out["operatingSystems"] = renderOperatingSystems(c.OperatingSystems)
	case model.PostureProcess:
		if p := c.Process; p != nil {
			out["process"] = map[string]any{"osType": p.OSType, "path": p.Path, "hashes": nonNil(p.Hashes), "signerFingerprint": p.SignerFingerprint}
		}
	case model.PostureProcessMulti:
		ps := make([]any, 0, len(c.Processes))
		for _, p := range c.Processes {
			ps = append(ps, map[string]any{"osType": p.OSType, "path": p.Path, "hashes": nonNil(p.Hashes), "signerFingerprints": nonNil(p.SignerFingerprints)})
		}
		out["semantic"], out["processes"] = c.Semantic, ps
	case model.PostureMFA:
		out["timeoutSeconds"], out["promptOnWake"], out["promptOnUnlock"] = c.TimeoutSeconds, c.PromptOnWake, c.PromptOnUnlock
		out["ignoreLegacyEndpoints"] = c.IgnoreLegacyEndpoints
	}
	return out
}

func (s *Server) postureCheckResource() resource[*model.PostureCheck] {
	type v = *model.PostureCheck
	return resource[v]{
		path: "/posture-checks", entity: "posture-checks", what: "posture check",
		roles: func(c v) []string { return c.RoleAttributes },
		fields: []field[v]{
			str("id", func(c v) string { return c.ID }),
			str("name", func(c v) string { return c.Name }),
			str("typeId", func(c v) string { return c.TypeID }),
			strs("roleAttributes", func(c v) []string { return c.RoleAttributes }),
			timeField("createdAt", func(c v) time.Time { return c.CreatedAt }),
			timeField("updatedAt", func(c v) time.Time { return c.UpdatedAt }),
		},
		render:  func(_ *call, c v) any { return renderPostureCheck(c) },
		newBody: func() body[v] { return new(postureCheckBody) },
		newRec:  func() v { return new(model.PostureCheck) },
		// A replace keeps the type, which cannot change, and the version the model counts.
		reset:  func(c v) { *c = model.PostureCheck{Base: c.Base, TypeID: c.TypeID, Version: c.Version}; c.Tags = nil },
		id:     func(c v) string { return c.ID },
		create: s.m.CreatePostureCheck, get: s.m.PostureCheck, all: s.m.PostureChecks,
		update: s.m.UpdatePostureCheck, remove: s.m.DeletePostureCheck,
	}
}

func (s *Server) renderPostureCheckType(t model.PostureCheckType) map[string]any {
	return map[string]any{
		"id": t.ID, "_links": links("posture-check-types", t.ID), "createdAt": s.info.Started.UTC(), "updatedAt": s.info.Started.UTC(),
		"tags": map[string]any{}, "name": t.ID, "operatingSystems": renderOperatingSystems(t.OperatingSystems), "version": "1",
	}
}

func (s *Server) listPostureCheckTypes(c *call) error {
	type v = model.PostureCheckType
	fields := []field[v]{str("id", func(t v) string { return t.ID }), str("name", func(t v) string { return t.ID })}
	return listOf(c, model.PostureCheckTypes(), fields, func(t v) any { return s.renderPostureCheckType(t) })
}

func (s *Server) getPostureCheckType(c *call) error {
	types := model.PostureCheckTypes()
	i := slices.IndexFunc(types, func(t model.PostureCheckType) bool { return t.ID == c.path("id") })
	if i < 0 {
		return newErr(codeNotFound, "posture check type %q not found", c.path("id"))
	}
	return c.data(http.StatusOK, s.renderPostureCheckType(types[i]))
}

// postureResponseBody is a posture response: id and typeId, and the fields of that type.
type postureResponseBody struct {
	ID                 *string   `json:"id"`
	TypeID             *string   `json:"typeId"`
	Domain             *string   `json:"domain"`
	Type               *string   `json:"type"`
	Version            *string   `json:"version"`
	Build              *string   `json:"build"`
	Path               *string   `json:"path"`
	IsRunning          *bool     `json:"isRunning"`
	Hash               *string   `json:"hash"`
	SignerFingerprints *[]string `json:"signerFingerprints"`
	MacAddresses       *[]string `json:"macAddresses"`
	Woken              *bool     `json:"woken"`
	Unlocked           *bool     `json:"unlocked"`
}

// maxBulkResponses bounds the responses of one bulk request.
const maxBulkResponses = 256

func (b *postureResponseBody) toModel() (model.PostureResponse, error) {
	var r model.PostureResponse
	if err := required(req("id", b.ID != nil), req("typeId", b.TypeID != nil)); err != nil {
		return r, err
	}
	typ := *b.TypeID
	for _, f := range []struct {
		name, typ string
		set       bool
	}{
		{"domain", model.PostureDomain, b.Domain != nil},
		{"type", model.PostureOS, b.Type != nil},
		{"version", model.PostureOS, b.Version != nil},
		{"build", model.PostureOS, b.Build != nil},
		{"path", model.PostureProcess, b.Path != nil},
		{"isRunning", model.PostureProcess, b.IsRunning != nil},
		{"hash", model.PostureProcess, b.Hash != nil},
		{"signerFingerprints", model.PostureProcess, b.SignerFingerprints != nil},
		{"macAddresses", model.PostureMAC, b.MacAddresses != nil},
		{"woken", model.PostureEndpointState, b.Woken != nil},
		{"unlocked", model.PostureEndpointState, b.Unlocked != nil},
	} {
		if f.set && f.typ != typ {
			return r, fieldErr(f.name, nil, "is a field of %s posture responses, not of %s", f.typ, typ)
		}
	}
	var err error
	switch typ {
	case model.PostureDomain:
		err = required(req("domain", b.Domain != nil))
	case model.PostureOS:
		err = required(req("type", b.Type != nil), req("version", b.Version != nil))
	case model.PostureProcess:
		err = required(req("path", b.Path != nil))
	case model.PostureMAC:
		err = required(req("macAddresses", b.MacAddresses != nil))
	}
	if err != nil {
		return r, err
	}
	r.ID, r.TypeID = *b.ID, typ
	set(&r.Domain, b.Domain)
	set(&r.OSType, b.Type)
	set(&r.OSVersion, b.Version)
	set(&r.OSBuild, b.Build)
	set(&r.Path, b.Path)
	set(&r.IsRunning, b.IsRunning)
	set(&r.Hash, b.Hash)
	set(&r.SignerFingerprints, b.SignerFingerprints)
	set(&r.MacAddresses, b.MacAddresses)
	set(&r.Woken, b.Woken)
	set(&r.Unlocked, b.Unlocked)
	return r, model.CheckPostureResponse(&r)
}

// inElement names the element of a bulk request that a validation error is about.
func inElement(err error, i int) error {
	prefix := "[" + strconv.Itoa(i) + "]"
	var ae *apiErr
	var me *model.Error
	switch {
	case errors.As(err, &ae) && ae.field != "":
		out := *ae
		out.field = prefix + "." + ae.field
		return &out
	case errors.As(err, &me) && me.Field != "":
		out := *me
		out.Field = prefix + "." + me.Field
		return &out
	}
	return err
}

func renderPostureResponse(list []model.ServiceTimeout) map[string]any {
	services := make([]any, 0, len(list))
	for _, st := range list {
		services = append(services, map[string]any{"id": st.ServiceID, "name": st.Name, "postureQueryType": st.QueryType,
			"timeout": st.Timeout, "timeoutRemaining": st.TimeoutRemaining})
	}
	return map[string]any{"services": services}
}

func (s *Server) postureResponse(c *call) error {
	var b postureResponseBody
	if err := decodeJSON(c.w, c.r, &b); err != nil {
		return err
	}
	r, err := b.toModel()
	if err != nil {
		return err
	}
	changed, err := s.m.SubmitPosture(c.session, []model.PostureResponse{r})
	if err != nil {
		return err
	}
	return c.data(http.StatusCreated, renderPostureResponse(changed))
}

func (s *Server) postureResponseBulk(c *call) error {
	var bodies []postureResponseBody
	if err := decodeJSON(c.w, c.r, &bodies); err != nil {
		return err
	}
	if len(bodies) > maxBulkResponses {
		return newErr(codeCouldNotValidate, "a bulk request holds at most %d posture responses, not %d", maxBulkResponses, len(bodies))
	}
	responses := make([]model.PostureResponse, 0, len(bodies))
	for i := range bodies {
		r, err := bodies[i].toModel()
		if err != nil {
			return inElement(err, i)
		}
		responses = append(responses, r)
	}
	changed, err := s.m.SubmitPosture(c.session, responses)
	if err != nil {
		return err
	}
	return c.data(http.StatusOK, renderPostureResponse(changed))
}

// renderPostureQueries renders the posture a service's policies ask of the client.
func renderPostureQueries(list []model.PolicyPosture) []any {
	out := make([]any, 0, len(list))
	for _, p := range list {
		qs := make([]any, 0, len(p.Queries))
		for _, q := range p.Queries {
			ch := q.Check
			r := map[string]any{
				"id": ch.ID, "_links": links("posture-checks", ch.ID), "createdAt": ch.CreatedAt, "updatedAt": ch.UpdatedAt,
				"tags": tagsOf(ch.Tags), "queryType": ch.TypeID, "isPassing": q.Passing,
				"timeout": q.Timeout, "timeoutRemaining": q.TimeoutRemaining,
			}
			switch ch.TypeID {
			case model.PostureProcess:
				if ch.Process != nil {
					r["process"] = map[string]any{"osType": ch.Process.OSType, "path": ch.Process.Path}
				}
			case model.PostureProcessMulti:
				ps := make([]any, 0, len(ch.Processes))
				for _, pr := range ch.Processes {
					ps = append(ps, map[string]any{"osType": pr.OSType, "path": pr.Path})
				}
				r["processes"] = ps
			case model.PostureMFA:
				r["promptOnWake"], r["promptOnUnlock"] = ch.PromptOnWake, ch.PromptOnUnlock
				if q.TimeoutAt != nil {
					r["timeoutAt"] = q.TimeoutAt.UTC()
				} else {
					r["timeoutAt"] = nil
				}
			}
			qs = append(qs, r)
		}
		out = append(out, map[string]any{"policyId": p.PolicyID, "policyType": p.PolicyType, "isPassing": p.Passing, "postureQueries": qs})
	}
	return out
}
