package api

import (
	"reflect"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// nullField is a request field that tells absent (no change) from null (clear) and a value,
// for the fields the reference marks x-nullable.
type nullField[T any] struct {
	set, null bool
	v         T
}

// UnmarshalJSONFrom decodes the field with the options of the whole body (decodeJSONBytes),
// so that the value inside is held to the same rules.
func (n *nullField[T]) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	n.set = true
	if dec.PeekKind() == 'n' {
		n.null = true
		_, err := dec.ReadToken()
		return err
	}
	return json.UnmarshalDecode(dec, &n.v)
}

func (nullField[T]) wrappedType() reflect.Type { return reflect.TypeFor[T]() }

// present reports whether the field holds a value (not absent, not null).
func (n nullField[T]) present() bool { return n.set && !n.null }

// apply copies the field onto dst: its value, or the zero value for null.
func (n nullField[T]) apply(dst *T) {
	switch {
	case !n.set:
	case n.null:
		var zero T
		*dst = zero
	default:
		*dst = n.v
	}
}
