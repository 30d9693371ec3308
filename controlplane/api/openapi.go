package api

import (
	"regexp"
	"strings"
)

// openAPI builds the Swagger 2.0 document of one API from the route table, so that it always
// lists exactly the operations this controller serves.
func (s *Server) openAPI(base string) map[string]any {
	set := client
	title := "zmesh edge client API"
	if base == ManagementBase {
		set, title = management, "zmesh edge management API"
	}
	paths := map[string]map[string]any{}
	for _, rt := range s.routesOf(set) {
		op := map[string]any{
			"summary":     rt.summary,
			"operationId": operationID(rt),
			"responses":   responses(rt),
		}
		if rt.access == public {
			op["security"] = []any{}
		}
		for _, name := range pathParams(rt.path) {
			op["parameters"] = append(asList(op["parameters"]), map[string]any{"name": name, "in": "path", "required": true, "type": "string"})
		}
		if paths[rt.path] == nil {
			paths[rt.path] = map[string]any{}
		}
		paths[rt.path][strings.ToLower(rt.method)] = op
	}
	return map[string]any{
		"swagger":  "2.0",
		"info":     map[string]any{"title": title, "version": "0.29.0"},
		"host":     s.info.Advertise,
		"basePath": base,
		"schemes":  []string{"https"},
		"consumes": []string{"application/json"},
		"produces": []string{"application/json"},
		"paths":    paths,
		"securityDefinitions": map[string]any{
			"ztSession": map[string]any{"type": "apiKey", "in": "header", "name": SessionHeader,
				"description": "the API session token returned by /authenticate"},
		},
		"security": []any{map[string]any{"ztSession": []any{}}},
		"definitions": map[string]any{
			"envelope": map[string]any{"type": "object", "required": []string{"data", "meta"},
				"properties": map[string]any{"data": map[string]any{}, "meta": map[string]any{"type": "object"}}},
			"apiErrorEnvelope": map[string]any{"type": "object", "required": []string{"error", "meta"},
				"properties": map[string]any{
					"error": map[string]any{"type": "object", "properties": map[string]any{
						"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"},
						"cause": map[string]any{"type": "object"}, "requestId": map[string]any{"type": "string"}}},
					"meta": map[string]any{"type": "object"}}},
		},
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

var pathParamRE = regexp.MustCompile(`\{([^}]+)\}`)

func pathParams(path string) []string {
	var out []string
	for _, m := range pathParamRE.FindAllStringSubmatch(path, -1) {
		out = append(out, m[1])
	}
	return out
}

func operationID(rt route) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(rt.method))
	for _, part := range strings.FieldsFunc(rt.path, func(r rune) bool { return r == '/' || r == '-' || r == '.' || r == '{' || r == '}' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

func responses(rt route) map[string]any {
	ok := "200"
	if rt.creates {
		ok = "201"
	}
	out := map[string]any{
		ok:    map[string]any{"description": "success", "schema": map[string]string{"$ref": "#/definitions/envelope"}},
		"400": map[string]any{"description": "the request is invalid", "schema": map[string]string{"$ref": "#/definitions/apiErrorEnvelope"}},
	}
	if rt.access != public {
		out["401"] = map[string]any{"description": "no valid API session", "schema": map[string]string{"$ref": "#/definitions/apiErrorEnvelope"}}
	}
	if rt.access == adminOnly {
		out["403"] = map[string]any{"description": "the API session is not an administrator's", "schema": map[string]string{"$ref": "#/definitions/apiErrorEnvelope"}}
	}
	return out
}
