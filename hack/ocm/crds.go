package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"open-cluster-management.io/ocm/manifests"
)

// managedCRDsDir is where the klusterlet operator keeps the CRDs it installs on a managed cluster.
const managedCRDsDir = "klusterlet/managed"

// runCRDs writes the managed-cluster CRDs of this OCM version (AppliedManifestWork, ClusterClaim, ClusterProperty),
// so the environment installs exactly what the agent in this binary watches.
func runCRDs(args []string) error {
	if len(args) != 2 || args[0] != "managed" {
		return fmt.Errorf("usage: ocm-local crds managed <dir>")
	}
	dir := args[1]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := fs.ReadDir(manifests.KlusterletManifestFiles, managedCRDsDir)
	if err != nil {
		return fmt.Errorf("read embedded klusterlet manifests: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), "crd.yaml") {
			continue
		}
		data, err := manifests.KlusterletManifestFiles.ReadFile(path.Join(managedCRDsDir, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			return err
		}
		fmt.Println(filepath.Join(dir, e.Name()))
	}
	return nil
}
