package main

import (
	goflag "flag"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// newFlagSet returns a flag set with klog's flags (-v, ...) and --kubeconfig, the admin kubeconfig of the cluster
// the component runs against.
func newFlagSet(name string, kubeconfig *string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	fs.StringVar(kubeconfig, "kubeconfig", "", "Admin kubeconfig of the cluster this component runs against; empty: the pod's in-cluster identity.")
	return fs
}

// restConfig loads path, or the in-cluster identity when path is empty (a pod, as OCM runs its components), with the
// QPS the upstream commands use (their controllercmd wrapper sets it likewise).
func restConfig(path string, qps float32, burst int) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %q: %w", path, err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	return cfg, nil
}
