package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"open-cluster-management.io/ocm/manifests"
)

const (
	// managedCRDsDir is where the klusterlet operator keeps the CRDs it installs on a managed cluster.
	managedCRDsDir = "klusterlet/managed"
	// hubCRDsDir is where the cluster-manager operator keeps the hub's CRDs, templates of the manager's namespace and
	// the add-on conversion webhook's CA bundle.
	hubCRDsDir = "cluster-manager/hub/crds"
)

const crdsUsage = `usage: ocm-local crds managed <dir>
       ocm-local crds hub <dir> --namespace <ns> --ca-bundle-file <file> [--webhook-url <url>]`

// runCRDs writes the CRDs of this OCM version that the environment installs, so it installs exactly what the
// components in this binary watch: the managed cluster's (AppliedManifestWork, ClusterClaim, ClusterProperty) or the
// hub's, rendered as the cluster-manager operator renders them. The hub's add-on CRDs convert between v1alpha1 and
// v1beta1 through the webhook: the Service cluster-manager-addon-webhook in --namespace, or --webhook-url (a test
// whose API server cannot reach Services), trusted with --ca-bundle-file.
func runCRDs(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("%s", crdsUsage)
	}
	kind, dir := args[0], args[1]
	switch kind {
	case "managed":
		if len(args) != 2 {
			return fmt.Errorf("%s", crdsUsage)
		}
		return writeCRDs(manifests.KlusterletManifestFiles, managedCRDsDir, dir, func(data []byte) ([]byte, error) { return data, nil })
	case "hub":
		render, err := hubCRDRenderer(args[2:])
		if err != nil {
			return err
		}
		return writeCRDs(manifests.ClusterManagerManifestFiles, hubCRDsDir, dir, render)
	default:
		return fmt.Errorf("%s", crdsUsage)
	}
}

func hubCRDRenderer(args []string) (func([]byte) ([]byte, error), error) {
	flags := pflag.NewFlagSet("crds hub", pflag.ContinueOnError)
	namespace := flags.String("namespace", "open-cluster-management-hub", "Namespace of the cluster manager's components (the webhook's Service).")
	caFile := flags.String("ca-bundle-file", "", "PEM file of the CA that signed the add-on webhook's serving certificate.")
	webhookURL := flags.String("webhook-url", "", "The webhook's URL instead of its Service, e.g. https://127.0.0.1:9443/convert.")
	if err := flags.Parse(args); err != nil {
		return nil, err
	}
	if *caFile == "" {
		return nil, fmt.Errorf("--ca-bundle-file is required\n%s", crdsUsage)
	}
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		return nil, err
	}
	values := struct{ ClusterManagerNamespace, AddonAPIServiceCABundle string }{*namespace, base64.StdEncoding.EncodeToString(ca)}
	return func(data []byte) ([]byte, error) {
		tmpl, err := template.New("crd").Option("missingkey=error").Parse(string(data))
		if err != nil {
			return nil, err
		}
		var out bytes.Buffer
		if err := tmpl.Execute(&out, values); err != nil {
			return nil, err
		}
		if *webhookURL == "" {
			return out.Bytes(), nil
		}
		return withWebhookURL(out.Bytes(), *webhookURL)
	}, nil
}

// withWebhookURL points a CRD's conversion webhook, if it has one, at url.
func withWebhookURL(data []byte, url string) ([]byte, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return nil, err
	}
	if crd.Spec.Conversion == nil || crd.Spec.Conversion.Webhook == nil || crd.Spec.Conversion.Webhook.ClientConfig == nil {
		return data, nil
	}
	crd.Spec.Conversion.Webhook.ClientConfig.Service = nil
	crd.Spec.Conversion.Webhook.ClientConfig.URL = &url
	return yaml.Marshal(&crd)
}

func writeCRDs(files fs.ReadFileFS, from, dir string, render func([]byte) ([]byte, error)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := fs.ReadDir(files, from)
	if err != nil {
		return fmt.Errorf("read embedded manifests %s: %w", from, err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), "crd.yaml") {
			continue
		}
		data, err := files.ReadFile(path.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if data, err = render(data); err != nil {
			return fmt.Errorf("render %s: %w", e.Name(), err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			return err
		}
		fmt.Println(filepath.Join(dir, e.Name()))
	}
	return nil
}
