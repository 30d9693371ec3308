package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Versions of OS checks. An entry of versions is one or more space-separated comparators
// that must all hold, each an operator (>=, <=, >, <, =, ==, !=) and a dotted version, e.g.
// ">=10.0.19041 <11". A version without operator matches itself and the versions it is a
// prefix of: "10" matches "10.0.19041".

type comparator struct {
	op string
	v  []int
}

const maxVersionParts = 8

func parseVersionRange(s string) ([]comparator, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("is empty; write a version such as 10.0.19041 or a range such as >=10 <11")
	}
	out := make([]comparator, 0, len(fields))
	for _, f := range fields {
		op := ""
		for _, o := range []string{">=", "<=", "==", "!=", ">", "<", "="} {
			if strings.HasPrefix(f, o) {
				op = o
				break
			}
		}
		v, err := parseVersion(strings.TrimPrefix(strings.TrimPrefix(f, op), "v"))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
		out = append(out, comparator{op, v})
	}
	return out, nil
}

func parseVersion(s string) ([]int, error) {
	parts := strings.Split(s, ".")
	if s == "" || len(parts) > maxVersionParts {
		return nil, fmt.Errorf("a version is 1 to %d dot-separated numbers", maxVersionParts)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 31)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number of a version", p)
		}
		out[i] = int(n)
	}
	return out, nil
}

// reportedVersion reads the leading numeric parts of a version as clients report it, e.g.
// 5.15.0 of "5.15.0-91-generic"; nil when it starts with no number.
func reportedVersion(s string) []int {
	var out []int
	for _, p := range strings.Split(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".") {
		end := 0
		for end < len(p) && end < 9 && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		if end == 0 || len(out) == maxVersionParts {
			break
		}
		n, _ := strconv.Atoi(p[:end])
		out = append(out, n)
		if end < len(p) {
			break
		}
	}
	return out
}

func compareVersions(a, b []int) int {
	for i := range max(len(a), len(b)) {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func versionMatches(ranges []string, actual string) bool {
	if len(ranges) == 0 {
		return true
	}
	v := reportedVersion(actual)
	if v == nil {
		return false
	}
	for _, r := range ranges {
		cmps, err := parseVersionRange(r)
		if err != nil {
			continue
		}
		ok := true
		for _, c := range cmps {
			d := compareVersions(v, c.v)
			switch c.op {
			case "":
				ok = ok && len(v) >= len(c.v) && slices.Equal(v[:len(c.v)], c.v)
			case "=", "==":
				ok = ok && d == 0
			case "!=":
				ok = ok && d != 0
			case ">":
				ok = ok && d > 0
			case ">=":
				ok = ok && d >= 0
			case "<":
				ok = ok && d < 0
			case "<=":
				ok = ok && d <= 0
			}
		}
		if ok {
			return true
		}
	}
	return false
}
