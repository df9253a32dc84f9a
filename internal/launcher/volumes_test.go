package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestWriteAtomicSwapsEveryFileAtOnceLikeTheKubelet(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "etc", "tls")

	g.Expect(writeAtomic(dir, volumePayload{"tls.crt": []byte("crt1"), "tls.key": []byte("key1"), "old": []byte("x")})).To(Succeed())
	first, err := os.Readlink(filepath.Join(dir, dataDirName))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(filepath.Join(dir, "tls.crt"))).To(Equal([]byte("crt1")))
	link, err := os.Readlink(filepath.Join(dir, "tls.crt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(link).To(Equal(filepath.Join(dataDirName, "tls.crt")), "each key is a symlink through ..data")

	g.Expect(writeAtomic(dir, volumePayload{"tls.crt": []byte("crt2"), "tls.key": []byte("key2")})).To(Succeed())
	second, err := os.Readlink(filepath.Join(dir, dataDirName))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second).NotTo(Equal(first))
	g.Expect(os.ReadFile(filepath.Join(dir, "tls.crt"))).To(Equal([]byte("crt2")))
	g.Expect(os.ReadFile(filepath.Join(dir, "tls.key"))).To(Equal([]byte("key2")))
	_, err = os.Lstat(filepath.Join(dir, "old"))
	g.Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue(), "a key gone from the Secret is gone from the volume")
	_, err = os.Stat(filepath.Join(dir, first))
	g.Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue(), "the previous generation is removed")
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(4)) // ..data, the timestamped folder, tls.crt, tls.key
	info, err := os.Stat(filepath.Join(dir, "tls.key"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
}

func TestSecretPayloadFollowsItemsAndOptional(t *testing.T) {
	g := NewWithT(t)
	secret := &corev1.Secret{Data: map[string][]byte{"a": []byte("1"), "b": []byte("2")}}

	g.Expect(secretPayload(&corev1.SecretVolumeSource{SecretName: "s"}, secret, "ns")).To(Equal(volumePayload{"a": []byte("1"), "b": []byte("2")}))
	g.Expect(secretPayload(&corev1.SecretVolumeSource{SecretName: "s", Items: []corev1.KeyToPath{{Key: "b", Path: "dir/b.txt"}}}, secret, "ns")).
		To(Equal(volumePayload{"dir/b.txt": []byte("2")}))
	g.Expect(secretPayload(&corev1.SecretVolumeSource{SecretName: "s", Optional: ptr.To(true)}, nil, "ns")).To(BeEmpty())

	_, err := secretPayload(&corev1.SecretVolumeSource{SecretName: "s"}, nil, "ns")
	g.Expect(err).To(MatchError("secret ns/s not found"))
	_, err = secretPayload(&corev1.SecretVolumeSource{SecretName: "s", Items: []corev1.KeyToPath{{Key: "c", Path: "c"}}}, secret, "ns")
	g.Expect(err).To(MatchError("secret ns/s has no key c"))
}

func TestConfigMapPayloadFollowsItemsAndOptionalLikeTheKubelet(t *testing.T) {
	g := NewWithT(t)
	cm := &corev1.ConfigMap{Data: map[string]string{"service-ca.crt": "pem"}, BinaryData: map[string][]byte{"bin": {0, 1}}}
	named := func(items []corev1.KeyToPath, optional *bool) *corev1.ConfigMapVolumeSource {
		return &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "service-ca-bundle"}, Items: items, Optional: optional}
	}

	g.Expect(configMapPayload(named(nil, nil), cm, "ns")).To(Equal(volumePayload{"service-ca.crt": []byte("pem"), "bin": {0, 1}}),
		"without items every key of data and binaryData is a file")
	g.Expect(configMapPayload(named([]corev1.KeyToPath{{Key: "service-ca.crt", Path: "ca/bundle.pem"}}, nil), cm, "ns")).
		To(Equal(volumePayload{"ca/bundle.pem": []byte("pem")}), "items pick keys and name their files")
	g.Expect(configMapPayload(named(nil, ptr.To(true)), nil, "ns")).To(BeEmpty(), "an optional missing ConfigMap is an empty folder")
	g.Expect(configMapPayload(named([]corev1.KeyToPath{{Key: "other", Path: "other"}, {Key: "bin", Path: "bin"}}, ptr.To(true)), cm, "ns")).
		To(Equal(volumePayload{"bin": {0, 1}}), "an optional missing key is no file")

	_, err := configMapPayload(named(nil, nil), nil, "ns")
	g.Expect(err).To(MatchError("configmap ns/service-ca-bundle not found"))
	_, err = configMapPayload(named(nil, ptr.To(false)), nil, "ns")
	g.Expect(err).To(MatchError("configmap ns/service-ca-bundle not found"))
	var missing *missingError
	g.Expect(errors.As(err, &missing)).To(BeTrue(), "waited for, as a missing Secret is")
	_, err = configMapPayload(named([]corev1.KeyToPath{{Key: "other", Path: "other"}}, nil), cm, "ns")
	g.Expect(err).To(MatchError("configmap ns/service-ca-bundle has no key other"))
}
