package proxyenv

import (
	"encoding/json"
	"fmt"
	"strings"

	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// ClusterRegistriesField is where a FieldError of ClusterRegistries points: the ManagedCluster annotation
// open-cluster-management.io/image-registries.
const ClusterRegistriesField = "metadata.annotations[" + clusterv1.ClusterImageRegistriesAnnotationKey + "]"

// ClusterRegistries reads the image mirrors a ManagedCluster's annotation open-cluster-management.io/image-registries
// sets for every add-on of the cluster, a JSON object {"registries": [{"source": ..., "mirror": ...}]}. No annotation
// gives none. An entry's mirror is validated as in MirrorImage; its source may be empty, which in OCM means every
// image. Malformed JSON or an entry gives a *FieldError under ClusterRegistriesField with Reason
// proxyv1alpha1.ReasonInvalidImageRegistries.
func ClusterRegistries(annotations map[string]string) ([]addonv1alpha1.ImageMirror, error) {
	raw, ok := annotations[clusterv1.ClusterImageRegistriesAnnotationKey]
	if !ok || strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var value struct {
		Registries []addonv1alpha1.ImageMirror `json:"registries"`
	}
	if err := json.Unmarshal([]byte(raw), &value); err != nil {
		return nil, fieldError(ClusterRegistriesField, proxyv1alpha1.ReasonInvalidImageRegistries, fmt.Sprintf(
			"not a JSON object like {\"registries\":[{\"source\":\"quay.io/ocm\",\"mirror\":\"mirror.local:5000/ocm\"}]}: %v", err))
	}
	for i, r := range value.Registries {
		if r.Source != "" {
			if err := validateRegistry(fmt.Sprintf("%s.registries[%d].source", ClusterRegistriesField, i), proxyv1alpha1.ReasonInvalidImageRegistries, "source", r.Source); err != nil {
				return nil, err
			}
		}
		if err := validateRegistry(fmt.Sprintf("%s.registries[%d].mirror", ClusterRegistriesField, i), proxyv1alpha1.ReasonInvalidImageRegistries, "mirror", r.Mirror); err != nil {
			return nil, err
		}
	}
	return value.Registries, nil
}

// AgentImage is the image the agent runs: image mirrored by the AddOnDeploymentConfig's registries (MirrorImage),
// and, when none of those matches, by the cluster's (ClusterRegistries), as OCM's add-on framework does it: the
// configuration wins over the annotation. Among the cluster's entries the last matching one wins, and an entry
// without a source matches every image and keeps only its last path segment, so every add-on of a cluster maps an
// image the same way.
func AgentImage(image string, configured, cluster []addonv1alpha1.ImageMirror) (string, error) {
	out, err := MirrorImage(image, configured)
	if err != nil || out != image {
		return out, err
	}
	last := -1 // the last matching entry wins
	for i, r := range cluster {
		if rest, ok := matchSource(image, r.Source); ok || r.Source == "" {
			if r.Source == "" {
				rest = "/" + image[strings.LastIndex(image, "/")+1:]
			}
			out, last = r.Mirror+rest, i
		}
	}
	if last < 0 {
		return image, nil
	}
	return mirrored(image, out, fmt.Sprintf("%s.registries[%d].mirror", ClusterRegistriesField, last), proxyv1alpha1.ReasonInvalidImageRegistries)
}
