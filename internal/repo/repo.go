// Package repo finds the files of this repository and of the Go modules it builds with: its root, and the CRDs of
// OCM (open-cluster-management.io/api) and of ClusterProfile (sigs.k8s.io/cluster-inventory-api) in the module cache.
// The local system and the tests both read them.
package repo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/mod/modfile"
)

// ocmHubCRDs are the OCM hub CRDs the operator reads or writes, by path inside the open-cluster-management.io/api
// module. The add-on CRDs are the v1alpha1 ones, as OCM v1.0 serves them: no v1beta1, no conversion webhook (OCM
// v1.2's hub CRDs, which need it, come from its own module: ocm-local crds hub).
var ocmHubCRDs = []string{
	"cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml",
	"cluster/v1beta2/0000_00_clusters.open-cluster-management.io_managedclustersets.crd.yaml",
	"cluster/v1beta2/0000_01_clusters.open-cluster-management.io_managedclustersetbindings.crd.yaml",
	"cluster/v1beta1/0000_02_clusters.open-cluster-management.io_placements.crd.yaml",
	"cluster/v1beta1/0000_03_clusters.open-cluster-management.io_placementdecisions.crd.yaml",
	"work/v1/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml",
	"addon/v1alpha1/0000_00_addon.open-cluster-management.io_clustermanagementaddons.crd.yaml",
	"addon/v1alpha1/0000_01_addon.open-cluster-management.io_managedclusteraddons.crd.yaml",
	"addon/v1alpha1/0000_02_addon.open-cluster-management.io_addondeploymentconfigs.crd.yaml",
}

// thisFile is this source file's path inside the module, which a build with -trimpath records in its place.
const thisFile = "/internal/repo/repo.go"

// Root is the root of this repository, found from this source file. A build with -trimpath (as make builds) records
// the file as module path and name only; then the root is the nearest folder, from the working directory up, whose
// go.mod declares this module.
var Root = sync.OnceValue(func() string {
	_, file, _, _ := runtime.Caller(0)
	if filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	}
	module := strings.TrimSuffix(filepath.ToSlash(file), thisFile)
	cwd, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("repo: the root of %s from the working directory: %v", module, err))
	}
	root, err := moduleRoot(cwd, module)
	if err != nil {
		panic(fmt.Sprintf("repo: %v (a -trimpath build finds the repository from the working directory: run it there)", err))
	}
	return root
})

// moduleRoot is the nearest folder from dir up whose go.mod declares module.
func moduleRoot(dir, module string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && modfile.ModulePath(data) == module {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no folder from %s up has the go.mod of %s", dir, module)
		}
	}
}

// OCMLocal is bin/ocm-local, the real OCM components of 'make ocm-local'.
func OCMLocal() string {
	return filepath.Join(Root(), "bin", "ocm-local")
}

// OperatorOCMCRDFiles are the OCM hub CRDs the operator reads or writes.
func OperatorOCMCRDFiles() ([]string, error) {
	return OCMAPIFiles(ocmHubCRDs...)
}

// CRDPaths are the operator's CRDs, the OCM hub CRDs, read from the open-cluster-management.io/api module in the Go
// module cache, and the ClusterProfile CRD of sigs.k8s.io/cluster-inventory-api (a hub with OCM's ClusterProfile
// feature on).
func CRDPaths() ([]string, error) {
	ocm, err := OCMAPIFiles(ocmHubCRDs...)
	if err != nil {
		return nil, err
	}
	profiles, err := ClusterProfileCRDFile()
	if err != nil {
		return nil, err
	}
	return append([]string{filepath.Join(Root(), "config", "crd", "bases"), profiles}, ocm...), nil
}

// ClusterProfileCRDFile is the ClusterProfile CRD of the sigs.k8s.io/cluster-inventory-api module the operator
// builds with.
func ClusterProfileCRDFile() (string, error) {
	files, err := moduleFiles("sigs.k8s.io/cluster-inventory-api", "config/crd/bases/multicluster.x-k8s.io_clusterprofiles.yaml")
	if err != nil {
		return "", err
	}
	return files[0], nil
}

// OCMAPIFiles are the paths of files of the open-cluster-management.io/api module (given by their path inside it) in
// the Go module cache.
func OCMAPIFiles(paths ...string) ([]string, error) {
	return moduleFiles("open-cluster-management.io/api", paths...)
}

// moduleFiles are the paths of files of a module of this repository's build (given by their path inside it) in the
// Go module cache.
func moduleFiles(module string, paths ...string) ([]string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = Root()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("locate the %s module (run 'go mod download'): %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return nil, fmt.Errorf("%s is not in the module cache: run 'go mod download'", module)
	}
	files := make([]string, 0, len(paths))
	for _, p := range paths {
		files = append(files, filepath.Join(dir, p))
	}
	return files, nil
}
