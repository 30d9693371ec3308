package query

import (
	"slices"
	"strings"
	"testing"
	"time"
)

type rec map[string]Value

func (r rec) Field(name string) (Value, bool) { v, ok := r[name]; return v, ok }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var records = []rec{
	{"id": String("1"), "name": String("alpha"), "isAdmin": Bool(true), "cost": Number(10), "createdAt": Time(t0), "roleAttributes": Strings([]string{"red", "blue"}), "tags.location": String("Paris")},
	{"id": String("2"), "name": String("Beta"), "isAdmin": Bool(false), "cost": Number(20), "createdAt": Time(t0.Add(time.Hour)), "roleAttributes": Strings([]string{"red"})},
	{"id": String("3"), "name": String("gamma ray"), "isAdmin": Bool(false), "cost": Number(20), "createdAt": Time(t0.Add(2 * time.Hour)), "roleAttributes": Strings(nil)},
}

var schema = map[string]Kind{"id": KindString, "name": KindString, "isAdmin": KindBool, "cost": KindNumber,
	"createdAt": KindTime, "roleAttributes": KindStrings, "tags.location": KindString}

func matching(t *testing.T, filter string) string {
	t.Helper()
	q, err := Parse(filter)
	if err != nil {
		t.Fatalf("%s: %v", filter, err)
	}
	if err := q.Validate(schema); err != nil {
		t.Fatalf("%s: %v", filter, err)
	}
	var ids []string
	for _, r := range records {
		if q.Match(r) {
			v, _ := r.Field("id")
			ids = append(ids, v.s)
		}
	}
	return strings.Join(ids, ",")
}

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct{ filter, want string }{
		{``, "1,2,3"},
		{`true`, "1,2,3"},
		{`false`, ""},
		{`name = "alpha"`, "1"},
		{`name != "alpha"`, "2,3"},
		{`isAdmin = true`, "1"},
		{`isAdmin = false and cost >= 20`, "2,3"},
		{`cost < 20 or name contains "ray"`, "1,3"},
		{`not (cost < 20 or name contains "ray")`, "2"},
		{`not cost = 20`, "1"},
		{`name icontains "BETA"`, "2"},
		{`name contains "BETA"`, ""},
		{`name not contains "l"`, "2,3"},
		{`name startswith "gam" or name endswith "ta"`, "2,3"},
		{`id in ["1", "3"]`, "1,3"},
		{`id not in ["1", "3"]`, "2"},
		{`cost between 15 and 20`, "2,3"},
		{`cost not between 15 and 20`, "1"},
		{`createdAt > datetime(2026-01-02T03:30:00Z)`, "2,3"},
		{`createdAt between datetime(2026-01-02T03:00:00Z) and datetime(2026-01-02T04:04:05Z)`, "1,2"},
		{`anyOf(roleAttributes) = "red"`, "1,2"},
		{`anyOf(roleAttributes) = "blue"`, "1"},
		{`allOf(roleAttributes) = "red"`, "2,3"}, // vacuously true for the empty list
		{`tags.location = "Paris"`, "1"},
		{`tags.location != "Paris"`, "2,3"}, // null is != every value
		{`tags.location is null`, "2,3"},
		{`tags.location is not null`, "1"},
		{`tags.location = null`, "2,3"},
		{`tags.location contains ""`, "1"}, // string tests are false on null
		{`(cost = 10 or cost = 20) and isAdmin = false`, "2,3"},
		{`cost = 10 or cost = 20 and isAdmin = false`, "1,2,3"},
		{`name = "alpha" sort by name desc limit 5`, "1"},
	}
	for _, tt := range tests {
		if got := matching(t, tt.filter); got != tt.want {
			t.Errorf("%s: matched %q, want %q", tt.filter, got, tt.want)
		}
	}
}

func TestSortSkipLimit(t *testing.T) {
	t.Parallel()
	q, err := Parse(`sort by cost desc, name asc skip 1 limit 2`)
	if err != nil {
		t.Fatal(err)
	}
	if q.Skip == nil || *q.Skip != 1 || q.Limit == nil || *q.Limit != 2 || len(q.Sort) != 2 {
		t.Fatalf("clauses: %+v", q)
	}
	rs := slices.Clone(records)
	slices.SortStableFunc(rs, func(a, b rec) int { return q.Compare(a, b) })
	var names []string
	for _, r := range rs {
		names = append(names, r["name"].s)
	}
	if got := strings.Join(names, ","); got != "Beta,gamma ray,alpha" {
		t.Errorf("sorted: %s", got)
	}
	q, _ = Parse(`sort by tags.location limit none`)
	if !q.LimitNone {
		t.Error("limit none not read")
	}
	rs = slices.Clone(records)
	slices.SortStableFunc(rs, func(a, b rec) int { return q.Compare(a, b) })
	if rs[2]["id"].s != "1" {
		t.Errorf("nulls sort first: %v", rs)
	}
}

func TestSyntaxErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ filter, want string }{
		{`name =`, `at offset 6: expected a value (string, number, true, false, null, datetime(...)), found the end of the filter`},
		{`name = "x`, `at offset 7: the string is not closed with a double quote`},
		{`name == "x"`, `at offset 6: expected a value (string, number, true, false, null, datetime(...)), found "="`},
		{`name ! "x"`, `at offset 5: "!" must be followed by "=" (write != or not)`},
		{`(name = "x"`, `at offset 11: expected ) to close the ( at offset 0, found the end of the filter`},
		{`name = "x")`, `at offset 10: expected and, or, sort by, skip, limit or the end of the filter, found ")"`},
		{`name like "x"`, `at offset 5: expected an operator (=, !=, <, >, <=, >=, contains, icontains, startswith, endswith, in, between, is) after name, found "like"`},
		{`id in "x"`, `at offset 6: expected [ after in, found "x"`},
		{`id in ["x" "y"]`, `at offset 11: expected , or ] in the in list, found "y"`},
		{`cost between 1 or 2`, `at offset 15: expected and between the two values of between, found "or"`},
		{`createdAt > datetime(yesterday)`, `at offset 12: datetime(yesterday) is not an RFC 3339 time such as 2024-01-02T03:04:05Z`},
		{`sort name`, `at offset 5: expected by after sort, found "name"`},
		{`limit -1`, `at offset 6: expected a whole number after limit, found "-1"`},
		{`limit 2 skip 1`, `at offset 8: expected and, or, sort by, skip, limit or the end of the filter, found "skip"`},
		{`name is "x"`, `at offset 8: expected null after is, found "x"`},
		{`and`, `at offset 0: expected a field name, not, ( or true/false, found "and"`},
		{`name = @`, `at offset 7: unexpected character '@'`},
		{`a. = 1`, `at offset 0: "a." is not a field name`},
		{strings.Repeat("(", 65) + "a = 1" + strings.Repeat(")", 65), `at offset 64: the filter nests deeper than 64 levels`},
		{`id in [` + strings.TrimSuffix(strings.Repeat(`"x",`, 1001), ",") + `]`, `at offset 4010: the in list holds more than 1000 values`},
		{strings.Repeat(" ", MaxLength+1), `at offset 4096: the filter is longer than 4096 bytes`},
	}
	for _, tt := range tests {
		_, err := Parse(tt.filter)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%.40s: error %v, want %s", tt.filter, err, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct{ filter, want string }{
		{`NAME = "x"`, `unknown field "NAME"; known fields: cost, createdAt, id, isAdmin, name, roleAttributes, tags.location`},
		{`isAdmin contains "x"`, `field "isAdmin" is a boolean; "contains" applies to strings`},
		{`isAdmin > true`, `field "isAdmin" is a boolean; ">" applies to strings, numbers and datetimes`},
		{`cost = "ten"`, `field "cost" is a number; "ten" is a string`},
		{`roleAttributes = "red"`, `field "roleAttributes" is a list; compare its elements with anyOf(roleAttributes) or allOf(roleAttributes)`},
		{`anyOf(name) = "x"`, `anyOf() applies to list fields; field "name" is a string`},
		{`name = "x" sort by roleAttributes`, `field "roleAttributes" is a list and cannot be sorted by`},
		{`sort by nope`, `unknown field "nope"; known fields: cost, createdAt, id, isAdmin, name, roleAttributes, tags.location`},
		{`cost < null`, `field "cost" is a number; null is a null`},
	}
	for _, tt := range tests {
		q, err := Parse(tt.filter)
		if err != nil {
			t.Fatalf("%s: %v", tt.filter, err)
		}
		if err := q.Validate(schema); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v, want %s", tt.filter, err, tt.want)
		}
	}
}

var roundTripSeeds = []string{
	``, `true`, `name = "a\"b\\c\n"`, `not (a = 1 and b != -2.5e+10) or c in ["x", 1, true, null]`,
	`anyOf(r) = "x" and allOf(r) not contains "y"`, `t between datetime(2026-01-02T03:04:05.123+01:00) and datetime(2027-01-01T00:00:00Z)`,
	`a is not null sort by a desc, b skip 3 limit none`, `x not between 1 and 2 limit 10`, `NOT x STARTSWITH "a" AND y ENDSWITH "b"`,
}

func TestStringRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range roundTripSeeds {
		q, err := Parse(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		again, err := Parse(q.String())
		if err != nil {
			t.Fatalf("%s: canonical form %q does not parse: %v", s, q.String(), err)
		}
		if again.String() != q.String() {
			t.Errorf("%s: %q became %q", s, q.String(), again.String())
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range roundTripSeeds {
		f.Add(s)
	}
	for _, s := range []string{`name =`, `(((`, `id in [`, `datetime(`, `"\`, `limit 99999999999`, `a = 1e999`, `a = --1`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := Parse(s)
		if err != nil {
			if _, ok := err.(*SyntaxError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		canon := q.String()
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("%q: canonical form %q does not parse: %v", s, canon, err)
		}
		if again.String() != canon {
			t.Fatalf("%q: canonical form %q became %q", s, canon, again.String())
		}
		q.Validate(schema)
		for _, r := range records {
			q.Match(r)
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	q, err := Parse(`(name contains "a" or anyOf(roleAttributes) = "blue") and cost >= 10 and isAdmin = false`)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range records {
			q.Match(r)
		}
	}
}
