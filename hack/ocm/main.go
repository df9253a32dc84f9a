// Command ocm-local runs the real Open Cluster Management v1.0.0 components as plain processes, for the local
// multi-cluster environment (internal/multicluster) where pods never run:
//
//	ocm-local hub   --kubeconfig <hub admin> --hub-apiserver-url <url>
//	ocm-local agent --kubeconfig <managed admin> --cluster-name <name> --bootstrap-kubeconfig <file> --hub-kubeconfig-dir <dir>
//	ocm-local crds  managed <dir>
//
// hub runs the registration controllers, the add-on manager and the work hub manager in one process; agent runs the
// singleton klusterlet agent (registration and work) of one managed cluster; crds writes the CRDs the klusterlet
// needs on its managed cluster. Every upstream flag of those components is accepted too (see --help).
//
// It lives in its own Go module because OCM v1.0.0 needs k8s.io v0.32 while the operator uses v0.37.
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
  hub     OCM hub: registration controllers, add-on manager and work hub manager
  agent   singleton klusterlet agent (registration and work) for one managed cluster
  crds    crds managed <dir>: write the CRDs the klusterlet needs on the managed cluster
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	// SIGTERM is how internal/multicluster stops us; SIGINT is for a person at a terminal.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "hub":
		err = runHub(ctx, args)
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
