package controlplane

import (
	"debug/buildinfo"
	"fmt"
	"strings"
)

// addonManagerEnv names the existing addon's manager for TestControlPlaneVersusAddon.
const addonManagerEnv = "BENCH_ADDON_MANAGER"

// addonManagerPackage is the main package of the existing OCM cluster-proxy addon's hub manager.
const addonManagerPackage = "open-cluster-management.io/cluster-proxy/cmd/addon-manager"

// howToBuildAddonManager is how a user gets the binary; the project never downloads it.
const howToBuildAddonManager = "clone https://github.com/open-cluster-management-io/cluster-proxy, check out v0.11.0 and run " +
	"'go build -mod=vendor ./cmd/addon-manager' in it"

// addonManagerVersion checks that path is the existing addon's manager, by the package path and module its Go build
// information records, and returns the module's version and VCS revision as text.
func addonManagerVersion(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%s is not set: give the path of the existing addon's addon-manager (%s)", addonManagerEnv, howToBuildAddonManager)
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s=%s: not a Go program whose build information can be read: %w (%s)", addonManagerEnv, path, err, howToBuildAddonManager)
	}
	if info.Path != addonManagerPackage {
		what := info.Path
		if what == "" {
			what = "a program without a main package path"
		}
		return "", fmt.Errorf("%s=%s is %s, not the existing addon's manager %s (%s)", addonManagerEnv, path, what, addonManagerPackage, howToBuildAddonManager)
	}
	// A build from a clone records no module version ("(devel)"), and a revision only when git stamped it; the
	// addon-framework it was built with tells the release too.
	parts := []string{info.Main.Version}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			parts = append(parts, s.Value[:12])
		}
	}
	for _, d := range info.Deps {
		if d.Path == "open-cluster-management.io/addon-framework" {
			parts = append(parts, "addon-framework "+d.Version)
		}
	}
	version := strings.TrimSpace(strings.Join(parts, " "))
	if version == "" {
		version = "(no version recorded)"
	}
	return version, nil
}
