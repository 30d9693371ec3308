package cluster

import (
	"errors"
	"fmt"
)

// SnapshotCompacted takes a snapshot now and compacts the log up to it keeping one entry,
// whatever the configured trailing logs, then restores them: a member added afterwards is
// sent the snapshot rather than the log before it. Raft reads the trailing logs from its
// live configuration when it compacts after a snapshot, so the node keeps running.
func (n *Node) SnapshotCompacted() error {
	old := n.raft.ReloadableConfig()
	one := old
	one.TrailingLogs = 1
	if err := n.raft.ReloadConfig(one); err != nil {
		return fmt.Errorf("cluster: keep one trailing log on %s: %w", n.id, err)
	}
	err := n.Snapshot()
	if rerr := n.raft.ReloadConfig(old); rerr != nil {
		err = errors.Join(err, fmt.Errorf("cluster: restore %d trailing logs on %s: %w", old.TrailingLogs, n.id, rerr))
	}
	return err
}
