// Package paths chooses where circuits go: the mesh of routers as a graph whose edges are
// links weighted by their measured latency, the cheapest path between two routers
// (Dijkstra), and the terminator of a service a circuit ends at, by the service's terminator
// strategy. It holds no I/O: the controller feeds it link reports and asks it for paths.
package paths

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Link is a link between two routers as routers report it.
type Link struct {
	ID       string
	A, B     string        // router ids; links carry traffic both ways
	Latency  time.Duration // last measured round trip
	Reported time.Time
}

// cost is a link's weight: its latency in microseconds, at least 1, so that a path of more
// hops costs more at equal latency.
func (l Link) cost() int64 { return max(int64(l.Latency/time.Microsecond), 1) }

// Graph is the current mesh. It is safe for concurrent use.
type Graph struct {
	mu    sync.RWMutex
	links map[string]Link // by link id
	// trees caches the cheapest paths from each router asked about, until the links
	// change: circuits are set up thousands of times a second, links change every few
	// seconds. gen counts the changes, so that a tree computed meanwhile is not cached.
	trees map[string]tree
	gen   uint64
}

// NewGraph returns an empty mesh.
func NewGraph() *Graph { return &Graph{links: map[string]Link{}, trees: map[string]tree{}} }

// changed forgets the cached paths. Called with mu held for writing.
func (g *Graph) changed() {
	g.gen++
	clear(g.trees)
}

// Up adds or updates a link.
func (g *Graph) Up(l Link) {
	g.mu.Lock()
	if old, ok := g.links[l.ID]; !ok || old.A != l.A || old.B != l.B || old.cost() != l.cost() {
		g.changed()
	}
	g.links[l.ID] = l
	g.mu.Unlock()
}

// Down removes a link.
func (g *Graph) Down(linkID string) {
	g.mu.Lock()
	if _, ok := g.links[linkID]; ok {
		delete(g.links, linkID)
		g.changed()
	}
	g.mu.Unlock()
}

// RouterGone removes every link of a router (it disconnected from the controller).
func (g *Graph) RouterGone(routerID string) {
	g.mu.Lock()
	for id, l := range g.links {
		if l.A == routerID || l.B == routerID {
			delete(g.links, id)
			g.changed()
		}
	}
	g.mu.Unlock()
}

// Links returns the current links.
func (g *Graph) Links() []Link {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]Link, 0, len(g.links))
	for _, l := range g.links {
		out = append(out, l)
	}
	return out
}

// ErrNoPath: the two routers are not connected by links.
var ErrNoPath = errors.New("no path between the routers")

// Hop is one step of a path: the router, and the link that leads to it from the previous
// router ("" for the first router).
type Hop struct {
	Router string
	Link   string
}

// Path returns the cheapest path from router from to router to, and its cost. A path from a
// router to itself is that router alone, of cost 0.
func (g *Graph) Path(from, to string) ([]Hop, int64, error) {
	return g.shortest(from).path(to)
}

// tree holds the cheapest paths from one router to all others. It is not changed once
// built: trees are shared from the cache.
type tree struct {
	from string
	dist map[string]int64
	prev map[string]Hop // for each router, the router before it and the link between
}

// shortest returns the cheapest paths from router from over the current links, from the
// cache or by running Dijkstra.
func (g *Graph) shortest(from string) tree {
	g.mu.RLock()
	t, ok := g.trees[from]
	gen := g.gen
	if ok {
		g.mu.RUnlock()
		return t
	}
	adj := make(map[string][]Link, len(g.links))
	for _, l := range g.links {
		adj[l.A] = append(adj[l.A], l)
		adj[l.B] = append(adj[l.B], l)
	}
	g.mu.RUnlock()
	t = dijkstra(from, adj)
	g.mu.Lock()
	if g.gen == gen {
		g.trees[from] = t
	}
	g.mu.Unlock()
	return t
}

// dijkstra computes the cheapest paths from router from over the links adj lists for each
// router.
func dijkstra(from string, adj map[string][]Link) tree {
	t := tree{from: from, dist: map[string]int64{from: 0}, prev: map[string]Hop{}}
	q := &queue{{router: from}}
	for q.Len() > 0 {
		cur := heap.Pop(q).(item)
		if cur.cost > t.dist[cur.router] {
			continue
		}
		for _, l := range adj[cur.router] {
			next := l.B
			if next == cur.router {
				next = l.A
			}
			c := cur.cost + l.cost()
			if d, seen := t.dist[next]; !seen || c < d {
				t.dist[next] = c
				t.prev[next] = Hop{Router: cur.router, Link: l.ID}
				heap.Push(q, item{router: next, cost: c})
			}
		}
	}
	return t
}

// path returns the cheapest path to router to and its cost.
func (t tree) path(to string) ([]Hop, int64, error) {
	total, ok := t.dist[to]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s to %s", ErrNoPath, t.from, to)
	}
	var rev []Hop
	for at := to; at != t.from; {
		p := t.prev[at]
		rev = append(rev, Hop{Router: at, Link: p.Link})
		at = p.Router
	}
	path := []Hop{{Router: t.from}}
	for i := len(rev) - 1; i >= 0; i-- {
		path = append(path, rev[i])
	}
	return path, total, nil
}

type item struct {
	router string
	cost   int64
}

type queue []item

func (q queue) Len() int           { return len(q) }
func (q queue) Less(i, j int) bool { return q[i].cost < q[j].cost }
func (q queue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)        { *q = append(*q, x.(item)) }
func (q *queue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

// Terminator is a candidate end of a circuit.
type Terminator struct {
	ID         string
	Router     string
	Cost       int    // the terminator's own cost, 0 to 65535
	Precedence string // default, required or failed
}

// Terminator strategies.
const (
	SmartRouting = "smartrouting"
	Random       = "random"
	Weighted     = "weighted"
	HA           = "ha"
)

// ErrNoTerminator: the service has no terminator a circuit can reach.
var ErrNoTerminator = errors.New("no reachable terminator")

// Choice is a chosen terminator with the path to it.
type Choice struct {
	Terminator Terminator
	Path       []Hop
	Cost       int64
}

// Choose picks the terminator for a circuit entering at router from. Only terminators of the
// best precedence present (required before default; failed only when nothing else is) and
// reachable from from are candidates. smartrouting (and ha and weighted, which this
// controller treats alike) takes the lowest path cost plus terminator cost; random takes any
// candidate at random.
func (g *Graph) Choose(from, strategy string, terms []Terminator) (Choice, error) {
	var reachable []Choice
	paths := g.shortest(from)
	for _, t := range terms {
		path, cost, err := paths.path(t.Router)
		if err != nil {
			continue
		}
		reachable = append(reachable, Choice{Terminator: t, Path: path, Cost: cost + int64(t.Cost)})
	}
	best := ""
	for _, prec := range []string{"required", "default", "failed"} {
		for _, c := range reachable {
			if c.Terminator.Precedence == prec || (prec == "default" && c.Terminator.Precedence == "") {
				best = prec
				break
			}
		}
		if best != "" {
			break
		}
	}
	var cands []Choice
	for _, c := range reachable {
		p := c.Terminator.Precedence
		if p == "" {
			p = "default"
		}
		if p == best {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return Choice{}, fmt.Errorf("%w from router %s among %d terminators", ErrNoTerminator, from, len(terms))
	}
	if strategy == Random {
		return cands[rand.IntN(len(cands))], nil
	}
	pick := cands[0]
	for _, c := range cands[1:] {
		if c.Cost < pick.Cost || (c.Cost == pick.Cost && c.Terminator.ID < pick.Terminator.ID) {
			pick = c
		}
	}
	return pick, nil
}
