package sessionsync

import "github.com/zmesh/zmesh/internal/ctrlproto"

// The JSON a message spends on each entry besides its strings (field names, quotes,
// separators), rounded up.
const (
	apiSessionOverhead  = 62 // {"id":"","token":"","identityId":"","certFingerprints":[]},
	fingerprintOverhead = 3  // "",
	sessionOverhead     = 84 // {"id":"","token":"","apiSessionId":"","identityId":"","serviceId":"","type":""},
	removedOverhead     = 4  // "",
)

// builder splits entries into SessionState messages of at most max entries and about
// maxChunkBytes of JSON each.
type builder struct {
	max  int
	msgs []*ctrlproto.SessionState
	// n and size are the entries and the estimated bytes of the last message.
	n, size int
}

func newBuilder(max int) *builder { return &builder{max: max} }

// next returns the message the next entry of size bytes goes into.
func (b *builder) next(size int) *ctrlproto.SessionState {
	if len(b.msgs) == 0 || b.n >= b.max || (b.n > 0 && b.size+size > maxChunkBytes) {
		b.msgs = append(b.msgs, &ctrlproto.SessionState{})
		b.n, b.size = 0, 0
	}
	b.n++
	b.size += size
	return b.msgs[len(b.msgs)-1]
}

func (b *builder) addAPISession(e ctrlproto.APISession) {
	size := apiSessionOverhead + len(e.ID) + len(e.Token) + len(e.IdentityID)
	for _, fp := range e.CertFingerprints {
		size += fingerprintOverhead + len(fp)
	}
	m := b.next(size)
	m.APISessions = append(m.APISessions, e)
}

func (b *builder) addSession(e ctrlproto.Session) {
	m := b.next(sessionOverhead + len(e.ID) + len(e.Token) + len(e.APISessionID) + len(e.IdentityID) + len(e.ServiceID) + len(e.Type))
	m.Sessions = append(m.Sessions, e)
}

func (b *builder) removeAPISession(id string) {
	m := b.next(removedOverhead + len(id))
	m.RemovedAPISessions = append(m.RemovedAPISessions, id)
}

func (b *builder) removeSession(id string) {
	m := b.next(removedOverhead + len(id))
	m.RemovedSessions = append(m.RemovedSessions, id)
}

// snapshot returns the messages as a full state: the first with Reset, the last with
// Complete; an empty state is one message with both.
func (b *builder) snapshot() []*ctrlproto.SessionState {
	if len(b.msgs) == 0 {
		b.msgs = append(b.msgs, &ctrlproto.SessionState{})
	}
	b.msgs[0].Reset = true
	b.msgs[len(b.msgs)-1].Complete = true
	return b.msgs
}
