package launcher

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
)

// volumePayload is the files of one mounted volume, by path relative to the mount.
type volumePayload map[string][]byte

// hash identifies the content, so an unchanged Secret or ConfigMap is not written again.
func (p volumePayload) hash() string {
	h := sha256.New()
	for _, name := range p.names() {
		fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(p[name]))
		h.Write(p[name])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (p volumePayload) names() []string {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// secretPayload is what the kubelet puts in a secret volume: every key, or only the listed items under their paths.
// A missing Secret or key is an error unless the volume (or the Secret) is optional.
func secretPayload(src *corev1.SecretVolumeSource, secret *corev1.Secret, namespace string) (volumePayload, error) {
	var data map[string][]byte
	if secret != nil {
		data = secret.Data
	}
	return keyedPayload("secret", namespace, src.SecretName, secret != nil, data, src.Items, src.Optional)
}

// configMapPayload is what the kubelet puts in a configMap volume, by the same rules as a secret volume: its data and
// binaryData keys (the API server keeps them apart), or only the listed items.
func configMapPayload(src *corev1.ConfigMapVolumeSource, cm *corev1.ConfigMap, namespace string) (volumePayload, error) {
	var data map[string][]byte
	if cm != nil {
		data = make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
		for k, v := range cm.Data {
			data[k] = []byte(v)
		}
		for k, v := range cm.BinaryData {
			data[k] = v
		}
	}
	return keyedPayload("configmap", namespace, src.Name, cm != nil, data, src.Items, src.Optional)
}

// keyedPayload is the payload of a volume made from the keys of an object (kind namespace/name): every key, or only
// items. A missing object gives an empty volume and a missing key no file when the volume is optional; otherwise
// either is a missingError, which the pod waits out.
func keyedPayload(kind, namespace, name string, found bool, data map[string][]byte, items []corev1.KeyToPath, optional *bool) (volumePayload, error) {
	isOptional := optional != nil && *optional
	if !found {
		if isOptional {
			return volumePayload{}, nil
		}
		return nil, &missingError{fmt.Sprintf("%s %s/%s not found", kind, namespace, name)}
	}
	out := volumePayload{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = v
		}
		return out, nil
	}
	for _, item := range items {
		v, ok := data[item.Key]
		if !ok {
			if isOptional {
				continue
			}
			return nil, &missingError{fmt.Sprintf("%s %s/%s has no key %s", kind, namespace, name, item.Key)}
		}
		out[item.Path] = v
	}
	return out, nil
}

// writeAtomic makes dir hold exactly payload the way the kubelet's atomic writer updates a secret or configMap
// volume: the files are written into a new timestamped folder, the ..data symlink is renamed to point at it, and each
// top-level name is a symlink through ..data. A reader sees either every old file or every new one, never a mix, and
// a program watching the files sees them change in place.
func writeAtomic(dir string, payload volumePayload) error {
	for name := range payload {
		if name == "" || filepath.IsAbs(name) || strings.HasPrefix(name, "..") || strings.Contains(name, "/../") {
			return fmt.Errorf("volume path %q is not a relative path inside the volume", name)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	oldData, err := os.Readlink(filepath.Join(dir, dataDirName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}

	newData, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	for name, content := range payload {
		path := filepath.Join(newData, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		// Private keys live here: readable by this user only, whatever mode the volume asks for.
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return err
		}
	}
	tmpLink := filepath.Join(dir, newDataDirName)
	if err := os.Remove(tmpLink); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Symlink(filepath.Base(newData), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataDirName)); err != nil {
		return err
	}

	top := map[string]bool{}
	for name := range payload {
		top[strings.SplitN(name, "/", 2)[0]] = true
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(dataDirName, name), link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") || top[e.Name()] || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	// Only a folder this writer made (a name beside ..data) is removed.
	if oldData != "" && oldData != filepath.Base(newData) && filepath.Base(oldData) == oldData && strings.HasPrefix(oldData, "..") {
		return os.RemoveAll(filepath.Join(dir, oldData))
	}
	return nil
}
