package paths

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// mesh: A-B 10ms, B-C 10ms, A-C 50ms, C-D 1ms; E is alone.
func mesh() *Graph {
	g := NewGraph()
	g.Up(Link{ID: "ab", A: "A", B: "B", Latency: ms(10)})
	g.Up(Link{ID: "bc", A: "B", B: "C", Latency: ms(10)})
	g.Up(Link{ID: "ac", A: "A", B: "C", Latency: ms(50)})
	g.Up(Link{ID: "cd", A: "C", B: "D", Latency: ms(1)})
	return g
}

func routers(p []Hop) string {
	s := ""
	for _, h := range p {
		s += h.Router
	}
	return s
}

func TestPath(t *testing.T) {
	t.Parallel()
	g := mesh()
	for _, tc := range []struct{ from, to, want string }{
		{"A", "C", "ABC"}, {"C", "A", "CBA"}, {"A", "D", "ABCD"}, {"A", "A", "A"}, {"D", "B", "DCB"},
	} {
		p, _, err := g.Path(tc.from, tc.to)
		if err != nil || routers(p) != tc.want {
			t.Errorf("%s→%s: %s %v; want %s", tc.from, tc.to, routers(p), err, tc.want)
		}
	}
	p, cost, _ := g.Path("A", "D")
	if p[1].Link != "ab" || p[2].Link != "bc" || p[3].Link != "cd" || cost != 21000 {
		t.Errorf("links of A→D: %+v cost %d", p, cost)
	}
	if _, _, err := g.Path("A", "E"); !errors.Is(err, ErrNoPath) {
		t.Errorf("A→E: %v", err)
	}
	// A slower B-C link makes the direct link cheaper.
	g.Up(Link{ID: "bc", A: "B", B: "C", Latency: ms(100)})
	if p, _, _ := g.Path("A", "C"); routers(p) != "AC" {
		t.Errorf("after B-C slowed: %s", routers(p))
	}
	// The paths from A are cached now; losing the direct link must not leave them stale.
	g.Down("ac")
	if p, _, _ := g.Path("A", "C"); routers(p) != "ABC" {
		t.Errorf("after A-C went down: %s", routers(p))
	}
	g.RouterGone("C")
	if _, _, err := g.Path("A", "D"); !errors.Is(err, ErrNoPath) {
		t.Errorf("after C left: %v", err)
	}
}

func TestChoose(t *testing.T) {
	t.Parallel()
	g := mesh()
	terms := []Terminator{
		{ID: "t-d", Router: "D", Cost: 0},
		{ID: "t-b", Router: "B", Cost: 0},
		{ID: "t-e", Router: "E", Cost: 0}, // unreachable
	}
	c, err := g.Choose("A", SmartRouting, terms)
	if err != nil || c.Terminator.ID != "t-b" || routers(c.Path) != "AB" {
		t.Fatalf("smartrouting: %+v %v", c, err)
	}
	// The terminator's own cost counts.
	terms[1].Cost = 20000
	if c, _ := g.Choose("A", SmartRouting, terms); c.Terminator.ID != "t-d" {
		t.Fatalf("with cost: %s", c.Terminator.ID)
	}
	// required wins over default, failed only when nothing else is reachable.
	terms[1].Precedence = "required"
	if c, _ := g.Choose("A", SmartRouting, terms); c.Terminator.ID != "t-b" {
		t.Fatalf("required: %s", c.Terminator.ID)
	}
	failed := []Terminator{{ID: "f", Router: "D", Precedence: "failed"}}
	if c, err := g.Choose("A", SmartRouting, failed); err != nil || c.Terminator.ID != "f" {
		t.Fatalf("only failed: %+v %v", c, err)
	}
	// random picks among the candidates.
	seen := map[string]bool{}
	two := []Terminator{{ID: "x", Router: "B"}, {ID: "y", Router: "D"}}
	for range 200 {
		c, _ := g.Choose("A", Random, two)
		seen[c.Terminator.ID] = true
	}
	if !seen["x"] || !seen["y"] {
		t.Fatalf("random picked only %v", seen)
	}
	if _, err := g.Choose("A", SmartRouting, terms[2:]); !errors.Is(err, ErrNoTerminator) {
		t.Fatalf("unreachable only: %v", err)
	}
}

// BenchmarkChoose picks among 10 terminators in a mesh of 100 routers with 1,000 links.
func BenchmarkChoose(b *testing.B) {
	g := NewGraph()
	for i := range 1000 {
		a, c := fmt.Sprint(i%100), fmt.Sprint((i*37+11)%100)
		if a != c {
			g.Up(Link{ID: fmt.Sprint(i), A: a, B: c, Latency: ms(1 + i%20)})
		}
	}
	var terms []Terminator
	for i := range 10 {
		terms = append(terms, Terminator{ID: fmt.Sprint(i), Router: fmt.Sprint(i * 9)})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Choose("5", SmartRouting, terms); err != nil {
			b.Fatal(err)
		}
	}
}
