package filter

import (
	"strings"
	"testing"
)

// seedFilters are FuzzParse's seed corpus: every filter of the other tests and more.
func seedFilters() []string {
	seeds := []string{
		``,
		`true`,
		`name = "x" and (isAdmin = true or anyOf(roleAttributes) in ["a", "b"]) sort by name desc, createdAt asc limit 5`,
		`not (a=1 and b=2) or c>=-1.50e3`,
		`x between 1 and 99999999999999999`,
		`createdAt < datetime(2024-01-02T03:04:05.000+00:00)`,
		`name not icontains "A\n\u0001"`,
		`x is not null skip 3 limit none`,
		`anyOf(x) = 1 limit 5`,
		`allOf(roleAttributes) not in ["a","b"] or allOf(r) != "y"`,
		`n = 123456789012345678901 or n = 0.000000000000000000000000001 or n = -1.7976931348623157e308`,
		`n = 4.9e-324 or n = 2.2250738585072014e-308 or n = 9007199254740993`,
		`n in [1e308, 1e-308, 0.1, -0, 5e-324]`,
		`s = "\u00e9\u4e2d\uFFFF\u0000\\\"" and s != "\t\r\n"`,
		`d = datetime(0000-01-01T00:00:00+01:00) or d = datetime(9999-12-31T23:59:59.999999999-23:59)`,
		`d between datetime(2024-01-01T00:00:00Z) and datetime(2024-01-01T00:00:00.1Z)`,
		"name = \"x\"\n\tand\r\nb = 1",
		`((((a=1))))`,
		`not not not a=1`,
		`a=1 and (b=2 and (c=3 or (d=4 or e=5)))`,
		`sort by a,b desc,c asc skip 0 limit 0`,
		`limit none`,
		`skip 99999999`,
		`tags.location = "berlin" and tags.a.b_c = 1`,
		`NAME IS NULL OR Name Is Not Null`,
		`a = true and b = false and c = null and d != null`,
		`not(a=1)`,
		`a="x"and b=1`,
		"\xff",
		`"unterminated`,
		`datetime(`,
		`a in [`,
		`a between`,
		strings.Repeat("(", MaxDepth+1) + "a=1" + strings.Repeat(")", MaxDepth+1),
		strings.Repeat("not ", MaxDepth) + "a=1",
	}
	for _, e := range syntaxErrorCases() {
		seeds = append(seeds, e.in)
	}
	return seeds
}

// FuzzParse checks that Parse never panics and that what it parses prints in a
// canonical form that is no longer than the input and parses back to an equal query
// with the same canonical form. Validate, Match and Compare must not panic either.
func FuzzParse(f *testing.F) {
	for _, s := range seedFilters() {
		f.Add(s)
	}
	schema := identitySchema()
	rs := identities()
	f.Fuzz(func(t *testing.T, s string) {
		checkRoundTrip(t, s)
		q, err := Parse(s)
		if err != nil {
			return
		}
		_ = q.Validate(schema)
		for _, r := range rs {
			q.Match(r)
			q.Compare(r, rs[0])
		}
	})
}

func TestSeedsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range seedFilters() {
		checkRoundTrip(t, s)
	}
}
