package multicluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// workDirMarker marks a folder as an environment's work folder, which a later Start may clean.
const workDirMarker = ".multicluster"

// workDirContents is what the environment writes in its work folder.
var workDirContents = []string{"hub", "clusters", "crds", "logs", "tmp", "hub.kubeconfig", workDirMarker}

// cleanWorkDir removes what an earlier environment left in the work folder, whose etcd data and certificates must not
// reach the new control planes. A non-empty folder that is not an environment's is refused rather than cleaned.
func (e *Env) cleanWorkDir() error {
	entries, err := os.ReadDir(e.WorkDir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return os.MkdirAll(e.WorkDir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("read work folder: %w", err)
	}
	if _, err := os.Stat(e.path(workDirMarker)); err != nil {
		return fmt.Errorf("work folder %s is not empty and was not made by an earlier environment: use an empty or new folder", e.WorkDir)
	}
	for _, d := range workDirContents {
		if err := os.RemoveAll(e.path(d)); err != nil {
			return fmt.Errorf("clean work folder: %w", err)
		}
	}
	return nil
}

func (e *Env) prepareWorkDir(context.Context) error {
	dir := e.opts.WorkDir
	if dir == "" {
		d, err := os.MkdirTemp("", "multicluster-*")
		if err != nil {
			return fmt.Errorf("create work folder: %w", err)
		}
		dir, e.removeWorkDir = d, true
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	e.WorkDir = dir
	if err := e.cleanWorkDir(); err != nil {
		return err
	}
	for _, d := range []string{e.path("logs"), e.path("tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create work folder: %w", err)
		}
	}
	if err := os.WriteFile(e.path(workDirMarker), nil, 0o644); err != nil {
		return fmt.Errorf("mark work folder: %w", err)
	}
	e.logf("    %s", dir)
	return nil
}
