package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/openshift/library-go/pkg/controller/controllercmd"
	"github.com/openshift/library-go/pkg/operator/events"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	ocmfeature "open-cluster-management.io/api/feature"

	"open-cluster-management.io/ocm/pkg/addon"
	commonoptions "open-cluster-management.io/ocm/pkg/common/options"
	"open-cluster-management.io/ocm/pkg/features"
	placement "open-cluster-management.io/ocm/pkg/placement/controllers"
	reghub "open-cluster-management.io/ocm/pkg/registration/hub"
	workhub "open-cluster-management.io/ocm/pkg/work/hub"
)

// hubNamespace is where the cluster manager's controllers would run; only recorded in their context here.
const hubNamespace = "open-cluster-management-hub"

// runHub runs the controllers the cluster-manager operator deploys on a hub (its webhooks run apart, see runWebhook):
// the registration controllers (cluster namespaces, RBAC, leases, cluster sets, CSR approval only for auto-approved
// users), the placement controller, the add-on manager and the work hub manager, each as the upstream command would,
// until ctx ends. --components narrows them, e.g. to the add-on manager alone for a hub whose clusters have no
// klusterlets (the control-plane benchmark).
func runHub(ctx context.Context, args []string) error {
	var kubeconfig string
	fs := newFlagSet("hub", &kubeconfig)
	only := fs.StringSlice("components", nil, "Run only these components (registration, addon-manager, work-manager, placement); empty: all.")
	common := commonoptions.NewOptions()
	common.AddFlags(fs)
	regOpts := reghub.NewHubManagerOptions()
	regOpts.AddFlags(fs) // includes --hub-apiserver-url
	workOpts := workhub.NewWorkHubManagerOptions()
	workOpts.AddFlags(fs)
	utilruntime.Must(features.HubMutableFeatureGate.Add(ocmfeature.DefaultHubRegistrationFeatureGates))
	utilruntime.Must(features.HubMutableFeatureGate.Add(ocmfeature.DefaultHubWorkFeatureGates))
	utilruntime.Must(features.HubMutableFeatureGate.Add(ocmfeature.DefaultHubAddonManagerFeatureGates))
	features.HubMutableFeatureGate.AddFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := restConfig(kubeconfig, common.QPS, common.Burst)
	if err != nil {
		return err
	}
	klog.InfoS("Starting OCM hub", "apiserver", cfg.Host, "hubAPIServerURL", regOpts.ImportOption.APIServerURL)

	components := map[string]func(context.Context, *controllercmd.ControllerContext) error{
		"registration":  regOpts.RunControllerManager,
		"addon-manager": addon.RunManager,
		"work-manager":  workhub.NewWorkHubManagerConfig(workOpts).RunWorkHubManager,
		"placement":     placement.RunControllerManager,
	}
	if len(*only) != 0 {
		chosen := map[string]func(context.Context, *controllercmd.ControllerContext) error{}
		for _, name := range *only {
			run, ok := components[name]
			if !ok {
				return fmt.Errorf("--components: unknown component %q; known: registration, addon-manager, work-manager, placement", name)
			}
			chosen[name] = run
		}
		components = chosen
	}
	return runAll(ctx, components, func(name string) *controllercmd.ControllerContext {
		return &controllercmd.ControllerContext{
			KubeConfig:        cfg,
			EventRecorder:     events.NewLoggingEventRecorder(name, clock.RealClock{}),
			OperatorNamespace: hubNamespace,
			Clock:             clock.RealClock{},
		}
	})
}

// runAll runs every component until ctx ends; the first one that fails stops the others.
func runAll(ctx context.Context, components map[string]func(context.Context, *controllercmd.ControllerContext) error,
	controllerContext func(name string) *controllercmd.ControllerContext) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for name, run := range components {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := run(ctx, controllerContext(name))
			if ctx.Err() == nil {
				// A component returning on its own, even without an error, leaves the hub half-working.
				if err == nil {
					err = errors.New("stopped unexpectedly")
				}
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	if len(errs) == 0 {
		klog.InfoS("OCM hub stopped")
	}
	return errors.Join(errs...)
}
