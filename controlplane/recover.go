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
	// Aside holds copies of the store (db) and the raft directory (raft) as they were
	// before (empty on a dry run).
	Aside string
}

// RecoverMember makes the stopped controller cfg describes, the one survivor of a cluster
// that lost its quorum for good, a cluster of itself alone (cluster.Recover): started again,
// it leads, and new members are added to it from empty directories. It takes the data
// directory's lock (ErrDataDirInUse while the controller runs), checks that the member is in
// the configuration its raft state holds, and copies the store and the raft directory
// aside first, to <dataDir>/before-recover-<time>-<random>/: the recovery changes both for
// good. With dryRun it only reads the state, so that of several survivors the operator
// recovers the one holding the most of the log.
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
	db := filepath.Join(cfg.DataDir, "db")
	member := func(st *store.Store) cluster.Config {
		return cluster.Config{ID: cc.ID, Dir: cc.DataDir, Bind: cc.Listen, Advertise: cc.Advertise, Store: st, Log: log}
	}
	withStore := func(fn func(*store.Store) (cluster.State, error)) (cluster.State, error) {
		st, err := store.Open(db, log, store.Options{})
		if err != nil {
			return cluster.State{}, err
		}
		s, err := fn(st)
		if cerr := st.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close the store: %w", cerr)
		}
		return s, err
	}
	found, err := withStore(func(st *store.Store) (cluster.State, error) { return cluster.ReadState(member(st)) })
	if err != nil || dryRun {
		return Recovery{State: found}, err
	}
	if !found.Includes(cc.ID) {
		return Recovery{State: found}, fmt.Errorf("member %s is not in the configuration its raft state in %s holds: it was removed from the cluster, or cluster.id names another member; nothing was changed",
			cc.ID, cc.DataDir)
	}
	aside, err := os.MkdirTemp(cfg.DataDir, "before-recover-"+time.Now().UTC().Format("20060102T150405Z")+"-")
	if err != nil {
		return Recovery{State: found}, fmt.Errorf("make a directory to copy the store and the raft state aside: %w", err)
	}
	for _, d := range []struct{ from, to string }{{db, filepath.Join(aside, "db")}, {cc.DataDir, filepath.Join(aside, "raft")}} {
		if err := copyDir(d.from, d.to, aside); err != nil {
			os.RemoveAll(aside) // this run's directory alone
			return Recovery{State: found}, fmt.Errorf("copy %s aside before the recovery (nothing was changed): %w", d.from, err)
		}
	}
	s, err := withStore(func(st *store.Store) (cluster.State, error) { return cluster.Recover(member(st)) })
	if err != nil {
		return Recovery{State: s, Aside: aside}, fmt.Errorf("%w (the store and the raft state as they were are in %s)", err, aside)
	}
	return Recovery{State: s, Aside: aside}, nil
}

// copyDir copies the regular files and directories under src to dst, which must not exist,
// with their permissions, each file synced; it skips skip (the copies' directory, when it
// lies under src).
func copyDir(src, dst, skip string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == skip {
			return filepath.SkipDir
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
