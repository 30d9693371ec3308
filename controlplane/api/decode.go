package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
)

// maxBody is the largest request body the API reads.
const maxBody = 1 << 20

// readBody reads a request body up to maxBody.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(unwrapWriter(w), r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, newErr(codeRequestBodyTooLarge, "the request body is larger than %d bytes", maxBody)
	}
	if err != nil {
		return nil, newErr(codeCouldNotValidate, "cannot read the request body: %v", err)
	}
	return data, nil
}

// decodeJSON strictly decodes a JSON request body into v: unknown fields, wrong types and
// trailing data are COULD_NOT_VALIDATE errors naming the field.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return newErr(codeUnsupportedMedia, "the request body must be application/json, not %q", ct)
		}
	}
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
	return decodeJSONBytes(data, v)
}

func decodeJSONBytes(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return newErr(codeCouldNotValidate, "the request body is empty; a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return newErr(codeCouldNotValidate, "the request body holds more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return newErr(codeCouldNotValidate, "the request body holds data after the JSON value")
	}
	return nil
}

func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return newErr(codeCouldNotValidate, "the request body must be a JSON %s, not %s", typeErr.Type.Kind(), typeErr.Value)
		}
		return fieldErr(field, nil, "must be of type %s, got %s", jsonType(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return newErr(codeCouldNotValidate, "the request body is not valid JSON at offset %d: %v", syntaxErr.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return fieldErr(field, nil, "is not a field of this request")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newErr(codeCouldNotValidate, "the request body is truncated JSON")
	}
	return newErr(codeCouldNotValidate, "the request body is not valid: %v", err)
}

func jsonType(kind string) string {
	switch kind {
	case "int", "int64", "int32", "uint", "float64":
		return "number"
	case "struct", "map":
		return "object"
	case "slice":
		return "array"
	case "bool":
		return "boolean"
	}
	return kind
}

// required reports the first of fields whose value is missing.
func required(fields ...requiredField) error {
	for _, f := range fields {
		if !f.present {
			return fieldErr(f.name, nil, "is required")
		}
	}
	return nil
}

type requiredField struct {
	name    string
	present bool
}

func req(name string, present bool) requiredField { return requiredField{name, present} }

// checkTags enforces that tag values are null, strings or booleans.
func checkTags(field string, tags map[string]any) error {
	for k, v := range tags {
		switch v.(type) {
		case nil, string, bool:
		default:
			return fieldErr(field+"."+k, v, "tag values must be null, a string or a boolean")
		}
	}
	return nil
}

// checkLen enforces a length bound in characters.
func checkLen(field, value string, min, max int) error {
	n := len([]rune(value))
	if n < min || n > max {
		return fieldErr(field, nil, "must be %d to %d characters long, got %d", min, max, n)
	}
	return nil
}
