// Command ocm-local runs the real Open Cluster Management v1.2.0 components, one image for every OCM pod of the local
// system (internal/localsystem) and a process for the envtest suites:
//
//	ocm-local hub     --kubeconfig <hub admin> --hub-apiserver-url <url> [--components addon-manager,...]
//	ocm-local webhook --kubeconfig <hub admin> [--host <ip>] [--port <port>] [--certdir <dir>]
//	ocm-local agent   --kubeconfig <managed admin> --cluster-name <name> --bootstrap-kubeconfig <file> --hub-kubeconfig-dir <dir>
//	ocm-local crds    managed <dir> | hub <dir> --ca-bundle-file <file> [--webhook-url <url>]
//
// hub runs the registration controllers, the placement controller, the add-on manager and the work hub manager in one
// process; webhook serves the add-on API's conversion webhook (v1alpha1 <-> v1beta1); agent runs the singleton
// klusterlet agent (registration and work) of one managed cluster; crds writes the CRDs of a managed cluster or of
// the hub, rendered as OCM's operators render them. Every upstream flag of those components is accepted too (see
// --help).
//
// It lives in its own Go module because OCM v1.2.0 needs k8s.io v0.34 while the operator uses v0.37.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

const usage = `usage: ocm-local <command> [flags]

commands:
  hub      OCM hub: registration and placement controllers, add-on manager and work hub manager
  webhook  the add-on API's conversion webhook (ManagedClusterAddOn, ClusterManagementAddOn: v1alpha1 <-> v1beta1)
  agent    singleton klusterlet agent (registration and work) for one managed cluster
  crds     crds managed <dir>: write the CRDs the klusterlet needs on the managed cluster;
           crds hub <dir> --ca-bundle-file <file> [--namespace <ns>] [--webhook-url <url>]: the hub's CRDs
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	// SIGTERM is how a pod or a test stops us; SIGINT is for a person at a terminal.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "hub":
		err = runHub(ctx, args)
	case "webhook":
		err = runWebhook(ctx, args)
	case "agent":
		err = runAgent(ctx, args)
	case "crds":
		err = runCRDs(args)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	klog.Flush()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ocm-local %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
