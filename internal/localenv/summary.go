package localenv

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
)

// printSummary shows the state of every configuration and commands to paste into another terminal.
func (s *session) printSummary(mpcs []proxyv1alpha1.ManagedProxyConfiguration) {
	s.p.step("hub is ready")
	s.p.plain("")
	for i := range mpcs {
		s.printConfiguration(&mpcs[i])
	}
	s.printCommands(mpcs)
	s.p.plain("Logs:")
	s.p.plain("  manager                  %s", s.path(managerLogFile))
	s.p.plain("  kube-controller-manager  %s", s.path(gcLogFile))
	s.p.plain("")
}

func (s *session) printConfiguration(mpc *proxyv1alpha1.ManagedProxyConfiguration) {
	s.p.plain("ManagedProxyConfiguration %s", mpc.Name)
	w := tabwriter.NewWriter(s.p.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON")
	for _, c := range sortedConditions(mpc.Status.Conditions) {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", c.Type, c.Status, c.Reason)
	}
	_ = w.Flush() // writes to s.p.out, whose errors nothing here could act on
	entrypoint := mpc.Status.Entrypoint
	if entrypoint == "" {
		entrypoint = "(not reported)"
	}
	s.p.plain("  Entrypoint: %s", entrypoint)
	s.p.plain("")
}

func (s *session) printCommands(mpcs []proxyv1alpha1.ManagedProxyConfiguration) {
	s.p.plain("Use the hub from another terminal:")
	s.p.plain("  export KUBECONFIG=%s", shellQuote(s.path(adminKubeconfigFile)))
	var namespaces []string
	for i := range mpcs {
		s.p.plain("  kubectl get managedproxyconfiguration %s -o yaml", mpcs[i].Name)
		namespaces = append(namespaces, render.Namespace(&mpcs[i]))
	}
	s.p.plain("  kubectl get proxycertificates -A")
	slices.Sort(namespaces)
	for _, ns := range slices.Compact(namespaces) {
		s.p.plain("  kubectl -n %s get deploy,svc,secrets", ns)
	}
	s.p.plain("  kubectl get clustermanagementaddon cluster-proxy")
	s.p.plain("")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote makes a path safe to paste into a shell, leaving ordinary paths as they are.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
