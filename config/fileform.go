package config

import (
	"encoding/json"
	"reflect"
	"time"
)

// The configuration types hold every interval and timeout as a time.Duration, under the
// file's key names. The file writes a duration with a unit ("5m"), or as whole milliseconds
// or seconds where its field's tag says unit:"ms" or unit:"s" (connectTimeoutMs). fileForm
// turns a configuration into a value that marshals as the file writes it, in the types'
// field order, so that the effective configuration reads like a configuration file.

// MarshalYAML writes the router's configuration as its file would.
func (c Router) MarshalYAML() (any, error) { return fileForm(c), nil }

// MarshalJSON writes the router's configuration with the file's keys and units.
func (c Router) MarshalJSON() ([]byte, error) { return json.Marshal(fileForm(c)) }

// MarshalYAML writes the controller's configuration as its file would.
func (c Controller) MarshalYAML() (any, error) { return fileForm(c), nil }

// MarshalJSON writes the controller's configuration with the file's keys and units.
func (c Controller) MarshalJSON() ([]byte, error) { return json.Marshal(fileForm(c)) }

var (
	durationType  = reflect.TypeFor[time.Duration]()
	writtenType   = reflect.TypeFor[duration]()
	wholeUnitType = reflect.TypeFor[int64]()
)

// fileForm returns v, a configuration struct, with its durations as the file writes them.
// The value has no methods, so marshaling it does not come back here.
func fileForm(v any) any {
	rv := reflect.ValueOf(v)
	return fileValue(rv, fileType(rv.Type(), ""), "").Interface()
}

// fileType is t with each time.Duration replaced by the type the file writes it as; unit is
// the unit tag of the field of type t. Types without durations stay as they are, keeping
// their own marshaling (Address, Secret, TunnelService).
func fileType(t reflect.Type, unit string) reflect.Type {
	if t == durationType {
		if unit != "" {
			return wholeUnitType
		}
		return writtenType
	}
	if !holdsDuration(t) {
		return t
	}
	// holdsDuration looks only through these three kinds.
	switch t.Kind() {
	case reflect.Pointer:
		return reflect.PointerTo(fileType(t.Elem(), unit))
	case reflect.Slice:
		return reflect.SliceOf(fileType(t.Elem(), unit))
	default:
		var fields []reflect.StructField
		for f := range exportedFields(t) {
			f.Type = fileType(f.Type, f.Tag.Get("unit"))
			fields = append(fields, f)
		}
		return reflect.StructOf(fields)
	}
}

// fileValue converts v to type to, made by fileType for v's type and unit.
func fileValue(v reflect.Value, to reflect.Type, unit string) reflect.Value {
	if v.Type() == to {
		return v
	}
	switch {
	case v.Type() == durationType && unit == "ms":
		return reflect.ValueOf(time.Duration(v.Int()).Milliseconds())
	case v.Type() == durationType && unit == "s":
		return reflect.ValueOf(int64(time.Duration(v.Int()) / time.Second))
	case v.Type() == durationType:
		return reflect.ValueOf(duration(v.Int()))
	}
	out := reflect.New(to).Elem()
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			p := reflect.New(to.Elem())
			p.Elem().Set(fileValue(v.Elem(), to.Elem(), unit))
			out.Set(p)
		}
	case reflect.Slice:
		if !v.IsNil() {
			out.Set(reflect.MakeSlice(to, v.Len(), v.Len()))
			for i := range v.Len() {
				out.Index(i).Set(fileValue(v.Index(i), to.Elem(), unit))
			}
		}
	case reflect.Struct:
		i := 0
		for f := range exportedFields(v.Type()) {
			out.Field(i).Set(fileValue(v.FieldByIndex(f.Index), to.Field(i).Type, f.Tag.Get("unit")))
			i++
		}
	}
	return out
}

// holdsDuration reports whether a value of type t contains a time.Duration.
func holdsDuration(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		return holdsDuration(t.Elem())
	case reflect.Struct:
		for f := range exportedFields(t) {
			if f.Type == durationType || holdsDuration(f.Type) {
				return true
			}
		}
	}
	return t == durationType
}

// exportedFields yields the exported fields of struct type t, the ones that marshal.
func exportedFields(t reflect.Type) func(yield func(reflect.StructField) bool) {
	return func(yield func(reflect.StructField) bool) {
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && !yield(f) {
				return
			}
		}
	}
}
