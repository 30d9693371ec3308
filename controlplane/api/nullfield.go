package api

import (
	"bytes"
	"encoding/json"
)

// nullField is a request field that tells absent (no change) from null (clear) and a value,
// for the fields the reference marks x-nullable.
type nullField[T any] struct {
	set, null bool
	v         T
}

func (n *nullField[T]) UnmarshalJSON(b []byte) error {
	n.set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		n.null = true
		return nil
	}
	return json.Unmarshal(b, &n.v)
}

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
