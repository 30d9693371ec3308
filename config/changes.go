package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Changed compares two effective configurations of one kind (two *Router, two *Controller)
// through their JSON forms, the file's key names, and returns the fields whose values differ,
// sorted: dotted paths with list indexes ("listeners[1].options.mode"). A list whose length
// changed is one field, as is a section that appeared or went away. A reload uses it to name
// what it did not apply. Secrets print as "(hidden)" in both and so never differ.
func Changed(old, new any) ([]string, error) {
	a, err := jsonValue(old)
	if err != nil {
		return nil, err
	}
	b, err := jsonValue(new)
	if err != nil {
		return nil, err
	}
	var out []string
	diffValues("", a, b, &out)
	sort.Strings(out)
	return out, nil
}

// Under reports whether path is field or lies inside it: "listeners[0].options.services[2]"
// is under "listeners[0].options.services", "listeners[0].optionsX" is not.
func Under(path, field string) bool {
	rest, ok := strings.CutPrefix(path, field)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

func jsonValue(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("compare configurations: %w", err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("compare configurations: %w", err)
	}
	return out, nil
}

func diffValues(path string, a, b any, out *[]string) {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			keys := map[string]bool{}
			for k := range av {
				keys[k] = true
			}
			for k := range bv {
				keys[k] = true
			}
			for k := range keys {
				diffValues(join(path, k), av[k], bv[k], out)
			}
			return
		}
	case []any:
		if bv, ok := b.([]any); ok && len(av) == len(bv) {
			for i := range av {
				diffValues(path+"["+strconv.Itoa(i)+"]", av[i], bv[i], out)
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, path)
	}
}
