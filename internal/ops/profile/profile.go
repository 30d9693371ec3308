// Package profile writes the runtime profiles a process is configured to write: a CPU
// profile covering the whole run, and a heap profile rewritten at an interval and once more
// at stop. The router uses it for its `profile` section; anything else that runs for a while
// (the bench's processes) can use it the same way.
package profile

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"
)

// DefaultMemoryInterval is how often the heap profile is written when Options does not say
// (profile.memory.intervalMs defaults to 15000).
const DefaultMemoryInterval = 15 * time.Second

// Options say which profiles to write. Empty paths turn a profile off.
type Options struct {
	// CPUPath receives the CPU profile of the time between Start and Stop, written at Stop.
	// Only one CPU profile can run in a process at a time.
	CPUPath string
	// MemoryPath receives a heap profile every MemoryInterval and at Stop. Each write
	// replaces the file whole (a temporary file renamed over it), so a reader never sees
	// half a profile.
	MemoryPath     string
	MemoryInterval time.Duration // DefaultMemoryInterval when zero
	// Log receives the failures of the periodic heap writes, which do not stop profiling;
	// nil discards them.
	Log *slog.Logger
}

// Profiler is profiling in progress. Stop it to write the final profiles.
type Profiler struct {
	opts    Options
	cpuFile *os.File
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	err     error
}

// Start starts the profiles opts asks for. With neither path set it does nothing, and Stop
// returns nil.
func Start(opts Options) (*Profiler, error) {
	if opts.MemoryInterval <= 0 {
		opts.MemoryInterval = DefaultMemoryInterval
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	p := &Profiler{opts: opts, stop: make(chan struct{})}
	if opts.CPUPath != "" {
		// Profiles reveal what the process does with its data: readable by the owner only.
		f, err := os.OpenFile(opts.CPUPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("profile: CPU profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("profile: CPU profile %s: %w", opts.CPUPath, err)
		}
		p.cpuFile = f
	}
	if opts.MemoryPath != "" {
		p.wg.Go(p.heapLoop)
	}
	return p, nil
}

// heapLoop writes the heap profile every MemoryInterval until Stop.
func (p *Profiler) heapLoop() {
	t := time.NewTicker(p.opts.MemoryInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			if err := WriteHeap(p.opts.MemoryPath); err != nil {
				p.opts.Log.Warn("cannot write the heap profile", "err", err)
			}
		}
	}
}

// Stop writes the final heap profile and the CPU profile, and closes the CPU profile's
// file. It returns what went wrong, naming the file. Calling it again returns the same.
func (p *Profiler) Stop() error {
	p.once.Do(func() {
		close(p.stop)
		p.wg.Wait()
		var errs []error
		if p.opts.MemoryPath != "" {
			errs = append(errs, WriteHeap(p.opts.MemoryPath))
		}
		if p.cpuFile != nil {
			pprof.StopCPUProfile() // writes the profile before it returns
			if err := p.cpuFile.Close(); err != nil {
				errs = append(errs, fmt.Errorf("profile: CPU profile %s: %w", p.opts.CPUPath, err))
			}
		}
		p.err = errors.Join(errs...)
	})
	return p.err
}

// WriteHeap writes the heap profile (pprof format, gzipped protocol buffer) to path,
// replacing the file whole. The profile describes the heap as of the last garbage
// collection: it does not force one, which would disturb the process it observes.
func WriteHeap(path string) error {
	return writeAtomic(path, func(w io.Writer) error { return pprof.Lookup("heap").WriteTo(w, 0) })
}

// writeAtomic writes a temporary file next to path with write, then renames it over path.
// The file is not synced: a profile is for debugging, and a crash may lose the last one; what
// matters is that no reader ever finds a partial profile at path.
func writeAtomic(path string, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*") // mode 0600
	if err != nil {
		return fmt.Errorf("profile: heap profile %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return fmt.Errorf("profile: heap profile %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("profile: heap profile %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("profile: heap profile %s: %w", path, err)
	}
	return nil
}
