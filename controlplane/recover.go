package controlplane

import (
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane/cluster"
	"github.com/zmesh/zmesh/controlplane/store"
)

// Recovery is what RecoverMember found and did.
type Recovery struct {
	cluster.State
	// Aside is the copy of the raft directory as it was before (empty on a dry run).
	Aside string
}

// RecoverMember makes the stopped controller cfg describes, the one survivor of a cluster
// that lost its quorum for good, a cluster of itself alone (cluster.Recover): started again,
// it leads, and new members are added to it from empty directories. It takes the data
// directory's lock (ErrDataDirInUse while the controller runs) and copies the raft
// directory aside first, to <cluster.dataDir>.before-recover-<time>. With dryRun it only
// reads the state, so that of several survivors the operator recovers the one holding the
// most of the log.
func RecoverMember(cfg *config.Controller, log *slog.Logger, dryRun bool) (Recovery, error) {
	cc := cfg.Cluster
	if cc == nil {
		return Recovery{}, fmt.Errorf("the configuration has no cluster section: %w", ErrNotMember)
	}
	lock, err := lockDir(cfg.DataDir)
	if err != nil {
		return Recovery{}, err
	}
	defer lock.Close()
	st, err := store.Open(filepath.Join(cfg.DataDir, "db"), log, store.Options{})
	if err != nil {
		return Recovery{}, err
	}
	defer st.Close()
	c := cluster.Config{ID: cc.ID, Dir: cc.DataDir, Bind: cc.Listen, Advertise: cc.Advertise, Store: st, Log: log}
	if dryRun {
		s, err := cluster.ReadState(c)
		return Recovery{State: s}, err
	}
	if _, err := cluster.ReadState(c); err != nil { // nothing to copy aside without raft state
		return Recovery{}, err
	}
	aside := cc.DataDir + ".before-recover-" + time.Now().UTC().Format("20060102T150405Z")
	if err := copyDir(cc.DataDir, aside); err != nil {
		os.RemoveAll(aside)
		return Recovery{}, fmt.Errorf("copy the raft state aside before recovering it: %w", err)
	}
	s, err := cluster.Recover(c)
	if err != nil {
		return Recovery{State: s, Aside: aside}, fmt.Errorf("%w (the raft state as it was is in %s)", err, aside)
	}
	return Recovery{State: s, Aside: aside}, nil
}

// copyDir copies the regular files and directories under src to dst, which must not exist,
// with their permissions, each file synced.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(to, info.Mode().Perm())
		case d.Type().IsRegular():
			return copyFile(path, to, info.Mode().Perm())
		}
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
