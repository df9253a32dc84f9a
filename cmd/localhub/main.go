// Command localhub runs a local hub for development ('make run'): a control plane with the operator's CRDs, the
// manager binary and the sample configuration, kept up until Ctrl-C. The logic lives in internal/localenv.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localenv"
)

func main() {
	opts := localenv.Options{Out: os.Stdout}
	flag.StringVar(&opts.ManagerPath, "manager", localenv.DefaultManagerPath, "path of the manager binary")
	flag.StringVar(&opts.SamplesPath, "samples", localenv.DefaultSamplesPath(), "folder (or file) of YAML objects to apply")
	flag.StringVar(&opts.WorkDir, "workdir", "", "folder for kubeconfigs and logs, kept at exit (default: a new temporary folder, removed at exit)")
	flag.DurationVar(&opts.Timeout, "timeout", localenv.DefaultTimeout, "how long to wait for every ManagedProxyConfiguration to be Ready")
	flag.BoolVar(&opts.ExitWhenReady, "exit-when-ready", false, "stop and exit 0 once ready, after the summary (for smoke tests)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "localhub: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	// envtest logs through controller-runtime; localhub prints its own progress, and without a logger
	// controller-runtime complains on stderr.
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := localenv.Run(ctx, opts)
	stop()
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "localhub: %v\n", err)
	if errors.Is(err, context.Canceled) {
		os.Exit(130) // the shell's convention for "stopped by Ctrl-C"
	}
	os.Exit(1)
}
