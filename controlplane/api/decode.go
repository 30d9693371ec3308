package api

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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

// decodeJSONBytes is the API's one decoding of request bodies. Object member names must
// match the fields exactly (case-sensitive), unknown members, duplicate names at any depth,
// invalid UTF-8 (and lone surrogates), wrong types and trailing data are refused.
func decodeJSONBytes(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return newErr(codeCouldNotValidate, "the request body is empty; a JSON object is required")
	}
	// These are the defaults of json (v2) and jsontext; they are spelled out because the
	// API's safety rests on them.
	err := json.Unmarshal(data, v,
		json.RejectUnknownMembers(true),
		json.MatchCaseInsensitiveNames(false),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false))
	if err != nil {
		return jsonError(err, reflect.TypeOf(v))
	}
	return nil
}

// jsonError turns a decoding error into a COULD_NOT_VALIDATE error naming the field at
// fault; t is the type decoded into, used to name the field.
func jsonError(err error, t reflect.Type) error {
	var semErr *json.SemanticError
	var synErr *jsontext.SyntacticError
	switch {
	case errors.As(err, &synErr):
		field := fieldPath(synErr.JSONPointer, t)
		switch {
		case errors.Is(synErr.Err, jsontext.ErrDuplicateName):
			return fieldErr(field, nil, "appears more than once in its object; names must be unique")
		case synErr.Err != nil && synErr.Err.Error() == "invalid UTF-8": // jsonwire.ErrInvalidUTF8 is internal
			if field == "" {
				return newErr(codeCouldNotValidate, "the request body is not valid UTF-8 at offset %d", synErr.ByteOffset)
			}
			return fieldErr(field, nil, "is not valid UTF-8")
		case errors.Is(synErr.Err, io.ErrUnexpectedEOF):
			return newErr(codeCouldNotValidate, "the request body is truncated JSON")
		}
		if field != "" {
			return fieldErr(field, nil, "is not valid JSON at offset %d: %v", synErr.ByteOffset, synErr.Err)
		}
		return newErr(codeCouldNotValidate, "the request body is not valid JSON at offset %d: %v", synErr.ByteOffset, synErr.Err)
	case errors.As(err, &semErr):
		// A method's error (nullField) wraps the error of the value inside it.
		for {
			var inner *json.SemanticError
			if semErr.Err == nil || !errors.As(semErr.Err, &inner) {
				break
			}
			semErr = inner
		}
		field := fieldPath(semErr.JSONPointer, t)
		if errors.Is(semErr.Err, json.ErrUnknownName) {
			return fieldErr(field, nil, "is not a field of this request (names are case-sensitive)")
		}
		if errors.Is(semErr.Err, io.ErrUnexpectedEOF) {
			return newErr(codeCouldNotValidate, "the request body is truncated JSON")
		}
		want := "a different type"
		if semErr.GoType != nil {
			want = "of type " + jsonType(semErr.GoType)
		}
		got := jsonKind(semErr.JSONKind)
		if semErr.JSONValue != nil && semErr.JSONKind == '0' {
			got += " " + string(semErr.JSONValue)
		}
		why := ""
		if semErr.Err != nil {
			why = ": " + semErr.Err.Error()
		}
		if field == "" {
			return newErr(codeCouldNotValidate, "the request body must be %s, got %s%s", want, got, why)
		}
		return fieldErr(field, nil, "must be %s, got %s%s", want, got, why)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newErr(codeCouldNotValidate, "the request body is truncated JSON")
	}
	return newErr(codeCouldNotValidate, "the request body is not valid: %v", err)
}

// fieldPath names the value at p the way the API names fields: object members joined by
// dots, array elements as [i] ("roleAttributes[0]", "[2].typeId"). The decoded type t tells
// array indexes from object names; inside values of no fixed type, every step is a name.
func fieldPath(p jsontext.Pointer, t reflect.Type) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		t = valueType(t)
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			b.WriteString("[" + tok + "]")
			t = t.Elem()
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
		switch {
		case t == nil:
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			t = memberType(t, tok)
		default:
			t = nil
		}
	}
	return b.String()
}

// memberType is the type of the field of struct t named name in JSON, or nil; the fields of
// embedded structs count as t's own.
func memberType(t reflect.Type, name string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			if ft := memberType(f.Type, name); ft != nil {
				return ft
			}
		case f.IsExported() && tag == name:
			return f.Type
		}
	}
	return nil
}

// wrapper is a field type that decodes as a value of another type (nullField).
type wrapper interface{ wrappedType() reflect.Type }

// valueType is the type whose JSON form t decodes: t without pointers and wrappers.
func valueType(t reflect.Type) reflect.Type {
	for t != nil {
		switch {
		case t.Kind() == reflect.Pointer:
			t = t.Elem()
		case t.Implements(reflect.TypeFor[wrapper]()):
			t = reflect.Zero(t).Interface().(wrapper).wrappedType()
		default:
			return t
		}
	}
	return nil
}

// jsonType names the JSON type a Go type decodes from.
func jsonType(t reflect.Type) string {
	t = valueType(t)
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return "string"
		}
		return "object"
	case reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Bool:
		return "boolean"
	}
	return t.Kind().String()
}

// jsonKind names a JSON kind.
func jsonKind(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "an invalid value"
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
