package api

import (
	"encoding/json"
	"testing"

	"github.com/zmesh/zmesh/controlplane/model"
)

// The fabric API answers administrators only, lists routers, services and terminators from
// the model with the reference's envelope and fields, and refuses a bad circuit deletion.
func TestFabricAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := &model.EdgeRouter{Name: "r1"}
	if err := f.m.CreateEdgeRouter(r); err != nil {
		t.Fatal(err)
	}
	sv := &model.Service{Name: "svc"}
	if err := f.m.CreateService(sv); err != nil {
		t.Fatal(err)
	}
	term := &model.Terminator{ServiceID: sv.ID, RouterID: r.ID, Binding: "transport", Address: "tcp:127.0.0.1:1"}
	if err := f.m.CreateTerminator(term); err != nil {
		t.Fatal(err)
	}

	if rec := f.do("GET", FabricBase+"/routers", "", ""); rec.Code != 401 {
		t.Errorf("without a session: %d", rec.Code)
	}
	if rec := f.do("GET", FabricBase+"/circuits", f.normal, ""); rec.Code != 403 {
		t.Errorf("as a non-administrator: %d", rec.Code)
	}

	var routers struct {
		Data []struct {
			ID        string `json:"id"`
			Name      string `json:"name"`
			Connected bool   `json:"connected"`
		} `json:"data"`
		Meta struct {
			Pagination *struct {
				Limit, Offset, TotalCount *int
			} `json:"pagination"`
		} `json:"meta"`
	}
	rec := f.do("GET", FabricBase+`/routers?filter=name="r1"`, f.admin, "")
	if err := json.Unmarshal(rec.Body.Bytes(), &routers); err != nil || rec.Code != 200 {
		t.Fatalf("routers: %d %v %s", rec.Code, err, rec.Body)
	}
	if len(routers.Data) != 1 || routers.Data[0].ID != r.ID || routers.Data[0].Connected {
		t.Errorf("routers %+v", routers.Data)
	}
	if p := routers.Meta.Pagination; p == nil || p.Limit == nil || p.Offset == nil || p.TotalCount == nil || *p.TotalCount != 1 {
		t.Errorf("pagination %+v", p)
	}

	var terms struct {
		Data []struct {
			ID      string `json:"id"`
			Service struct {
				Name string `json:"name"`
			} `json:"service"`
			Router struct {
				Entity string `json:"entity"`
				Name   string `json:"name"`
			} `json:"router"`
			Binding string `json:"binding"`
		} `json:"data"`
	}
	rec = f.do("GET", FabricBase+"/services/"+sv.ID+"/terminators", f.admin, "")
	if err := json.Unmarshal(rec.Body.Bytes(), &terms); err != nil || rec.Code != 200 || len(terms.Data) != 1 {
		t.Fatalf("terminators of svc: %d %v %s", rec.Code, err, rec.Body)
	}
	if d := terms.Data[0]; d.ID != term.ID || d.Service.Name != "svc" || d.Router.Name != "r1" || d.Router.Entity != "routers" || d.Binding != "transport" {
		t.Errorf("terminator %+v", d)
	}
	var svc struct {
		Data struct {
			Name               string `json:"name"`
			TerminatorStrategy string `json:"terminatorStrategy"`
		} `json:"data"`
	}
	rec = f.do("GET", FabricBase+"/services/"+sv.ID, f.admin, "")
	if err := json.Unmarshal(rec.Body.Bytes(), &svc); err != nil || rec.Code != 200 || svc.Data.Name != "svc" || svc.Data.TerminatorStrategy == "" {
		t.Errorf("service: %d %v %s", rec.Code, err, rec.Body)
	}

	for _, tc := range []struct {
		path, body string
		code       int
	}{
		{"/circuits/12345", "", 404},
		{"/circuits/not-a-number", "", 404},
		{"/circuits/12345", `{"immediate":"yes"}`, 400},
		{"/circuits/12345", `{"other":true}`, 400},
	} {
		if rec := f.do("DELETE", FabricBase+tc.path, f.admin, tc.body); rec.Code != tc.code {
			t.Errorf("DELETE %s %s: %d %s, want %d", tc.path, tc.body, rec.Code, rec.Body, tc.code)
		}
	}
	if rec := f.do("GET", FabricBase+"/links/nope", f.admin, ""); rec.Code != 404 {
		t.Errorf("unknown link: %d", rec.Code)
	}
}
