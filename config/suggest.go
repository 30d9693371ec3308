package config

import (
	"strings"
	"unicode"
)

// suggest returns the key of known that key is most likely a typo of, or "" when none is
// close. A key matches when it is equal ignoring case and punctuation ("api:;", "API"), or
// within two edits (an adjacent swap counts as one) and fewer than half the known key's
// length, so that short keys (v, ca, ctrl) do not match everything short.
func suggest(key string, known []string) string {
	nk := fold(key)
	best, bestDist := "", 3
	for _, k := range known {
		if k == key {
			continue
		}
		fk := fold(k)
		if fk == nk && nk != "" {
			return k
		}
		d := editDistance(nk, fk)
		if d <= 2 && d <= (len([]rune(fk))-1)/2 && d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// fold lowercases s and drops everything but letters and digits.
func fold(s string) string {
	var b strings.Builder
	for _, c := range s {
		if unicode.IsLetter(c) || unicode.IsDigit(c) {
			b.WriteRune(unicode.ToLower(c))
		}
	}
	return b.String()
}

// editDistance is the optimal string alignment distance of a and b: insertions, deletions,
// substitutions and swaps of adjacent characters each cost one.
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	prev2 := make([]int, len(t)+1)
	prev := make([]int, len(t)+1)
	cur := make([]int, len(t)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(s); i++ {
		cur[0] = i
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(t)]
}
