package main

import (
	"context"
	"path/filepath"
	"time"

	"github.com/openshift/library-go/pkg/controller/controllercmd"
	"github.com/openshift/library-go/pkg/operator/events"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	ocmfeature "open-cluster-management.io/api/feature"

	commonoptions "open-cluster-management.io/ocm/pkg/common/options"
	"open-cluster-management.io/ocm/pkg/features"
	"open-cluster-management.io/ocm/pkg/registration/register"
	regspoke "open-cluster-management.io/ocm/pkg/registration/spoke"
	singletonspoke "open-cluster-management.io/ocm/pkg/singleton/spoke"
	workspoke "open-cluster-management.io/ocm/pkg/work/spoke"
)

// agentRestartDelay spaces the agent's self-restarts (what a pod's restart would be), so a loop is not a hot one.
const agentRestartDelay = time.Second

// agentConfig is one parse of the agent's flags: the options are consumed by a run, so each restart parses anew.
type agentConfig struct {
	controllerContext *controllercmd.ControllerContext
	common            *commonoptions.AgentOptions
	registration      *regspoke.SpokeAgentOptions
	work              *workspoke.WorkloadAgentOptions
}

func parseAgentFlags(args []string) (*agentConfig, error) {
	var kubeconfig string
	fs := newFlagSet("agent", &kubeconfig)
	c := &agentConfig{
		common:       commonoptions.NewAgentOptions(), // --cluster-name, --hub-kubeconfig-dir, ...
		registration: regspoke.NewSpokeAgentOptions(), // --bootstrap-kubeconfig, ...
		work:         workspoke.NewWorkloadAgentOptions(),
	}
	c.common.AddFlags(fs)
	c.registration.AddFlags(fs)
	c.work.AddFlags(fs)
	features.SpokeMutableFeatureGate.AddFlag(fs)
	// The upstream default is the in-pod path; empty means "the kubeconfig the registration agent writes".
	c.work.WorkloadSourceConfig = ""
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.work.WorkloadSourceConfig == "" {
		c.work.WorkloadSourceConfig = filepath.Join(c.common.HubKubeconfigDir, register.KubeconfigFile)
	}
	cfg, err := restConfig(kubeconfig, c.common.CommonOpts.QPS, c.common.CommonOpts.Burst)
	if err != nil {
		return nil, err
	}
	c.controllerContext = &controllercmd.ControllerContext{
		KubeConfig:        cfg,
		EventRecorder:     events.NewLoggingEventRecorder("klusterlet-agent", clock.RealClock{}),
		OperatorNamespace: c.common.ComponentNamespace,
		Clock:             clock.RealClock{},
	}
	return c, nil
}

// runAgent runs the singleton klusterlet agent until ctx ends. The agent stops itself when it wants a restart (its
// bootstrap kubeconfig changed, ...), which in a pod the kubelet would do; here it is restarted in-process.
func runAgent(ctx context.Context, args []string) error {
	utilruntime.Must(features.SpokeMutableFeatureGate.Add(ocmfeature.DefaultSpokeRegistrationFeatureGates))
	utilruntime.Must(features.SpokeMutableFeatureGate.Add(ocmfeature.DefaultSpokeWorkFeatureGates))
	for {
		c, err := parseAgentFlags(args)
		if err != nil {
			return err
		}
		klog.InfoS("Starting klusterlet agent", "cluster", c.common.SpokeClusterName,
			"managedAPIServer", c.controllerContext.KubeConfig.Host, "hubKubeconfigDir", c.common.HubKubeconfigDir)
		runCtx, restart := context.WithCancel(ctx)
		agent := singletonspoke.NewAgentConfig(c.common, c.registration, c.work, restart)
		// Errors inside the agent are fatal upstream (klog.Fatal), as a crash-looping pod would be.
		err = agent.RunSpokeAgent(runCtx, c.controllerContext)
		restart()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			klog.InfoS("Klusterlet agent stopped")
			return nil
		}
		klog.InfoS("Klusterlet agent asked for a restart", "after", agentRestartDelay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(agentRestartDelay):
		}
	}
}
