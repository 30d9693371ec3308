package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/store"
)

// fsm applies the replicated log to the member's store: each entry is a store.WriteSet.
type fsm struct {
	st  *store.Store
	log *slog.Logger
	// dir holds the snapshot being installed while it is checked and loaded.
	dir string
}

// Apply applies one write set. Its result (nil or the error) is the response the member that
// made the entry waits for; every member gets the same, since the outcome depends only on
// the log.
func (f *fsm) Apply(l *raft.Log) any {
	var ws store.WriteSet
	if err := ws.UnmarshalBinary(l.Data); err != nil {
		f.log.Error("a raft log entry is no write set; the store does not take it", "index", l.Index, "err", err)
		return fmt.Errorf("cluster: log entry %d: %w", l.Index, err)
	}
	err := f.st.ApplyWrites(&ws, l.Index)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrStaleWrite):
		f.log.Debug("write set refused: computed on an older state", "index", l.Index, "err", err)
	default:
		f.log.Error("cannot apply a write set; this member's store no longer follows the log", "index", l.Index, "err", err)
	}
	return err
}

// snapshotMagic starts a snapshot, followed by the store's applied index at the snapshot
// (8 bytes big-endian) and a store backup (store.Backup).
const snapshotMagic = "zmesh-raft-snapshot 1\n"

// Snapshot notes the applied index; Persist then writes a backup. The backup is taken
// later than the index, while writes go on, so it may hold later write sets too: Badger's
// backup is one consistent state, it carries its own applied index, and the log entries
// raft replays after installing it that it holds already are skipped.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	idx, restoring, err := f.st.AppliedIndex()
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot: %w", err)
	}
	if restoring {
		return nil, fmt.Errorf("cluster: snapshot: %w", store.ErrRestoring)
	}
	return &snapshot{st: f.st, index: idx}, nil
}

type snapshot struct {
	st    *store.Store
	index uint64
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriterSize(sink, 256<<10)
	err := func() error {
		if _, err := io.WriteString(w, snapshotMagic); err != nil {
			return err
		}
		if _, err := w.Write(binary.BigEndian.AppendUint64(nil, s.index)); err != nil {
			return err
		}
		if err := s.st.Backup(w); err != nil {
			return err
		}
		return w.Flush()
	}()
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("cluster: write snapshot %s: %w", sink.ID(), err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// Restore installs a snapshot: raft calls it for a snapshot a leader sends a member that
// is too far behind for the log, and at every start for the latest local snapshot. A store
// that holds the snapshot's state already (its applied index is at least the snapshot's: a
// restart) is kept as it is; otherwise the snapshot is written to a file, checked, and
// replaces the live store's content (store.ReplaceFromBackup).
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := bufio.NewReaderSize(rc, 256<<10)
	head := make([]byte, len(snapshotMagic)+8)
	if _, err := io.ReadFull(r, head); err != nil {
		return fmt.Errorf("cluster: restore: read the snapshot's header: %w", err)
	}
	if got := head[:len(snapshotMagic)]; string(got) != snapshotMagic {
		return fmt.Errorf("cluster: restore: not a zmesh snapshot: it starts with %q, not %q", got, snapshotMagic)
	}
	idx := binary.BigEndian.Uint64(head[len(snapshotMagic):])
	local, restoring, err := f.st.AppliedIndex()
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	if !restoring && idx > 0 && local >= idx {
		f.log.Info("the store holds the snapshot's state already; keeping it", "snapshot_index", idx, "applied_index", local)
		return nil
	}
	tmp, err := os.CreateTemp(f.dir, "install-*.backup")
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: restore: spool the snapshot: %w", err)
	}
	if err := f.st.ReplaceFromBackup(tmp.Name()); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	f.log.Info("store replaced from a snapshot", "snapshot_index", idx, "applied_index_before", local)
	return nil
}
