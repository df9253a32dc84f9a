package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestCredentialIsAnExecPluginClientGoUses builds the plugin and lets client-go run it, as a kubeconfig's exec or a
// ClusterProfile consumer does: the server sees the token as the bearer, for both ExecCredential versions, and a
// token file is read again on every call.
func TestCredentialIsAnExecPluginClientGoUses(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubectl-cluster_proxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var mu sync.Mutex
	var seen []string
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NamespaceList","apiVersion":"v1","items":[]}`))
	}))
	defer server.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	mustDo(t, os.WriteFile(tokenFile, []byte("first\n"), 0o600))

	list := func(apiVersion string, args ...string) error {
		cfg := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
			ExecProvider: &clientcmdapi.ExecConfig{APIVersion: apiVersion, Command: bin, Args: append([]string{"credential"}, args...),
				InteractiveMode: clientcmdapi.NeverExecInteractiveMode, ProvideClusterInfo: true}}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		_, err = cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
		return err
	}
	mustDo(t, list("client.authentication.k8s.io/v1", "--token", "given"))
	mustDo(t, list("client.authentication.k8s.io/v1beta1", "--token-file", tokenFile))
	mustDo(t, os.WriteFile(tokenFile, []byte("rotated"), 0o600))
	mustDo(t, list("client.authentication.k8s.io/v1", "--token-file", tokenFile))
	want := []string{"Bearer given", "Bearer first", "Bearer rotated"}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("the server saw %q, want %q", seen, want)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	mustDo(t, os.WriteFile(empty, nil, 0o600))
	if err := list("client.authentication.k8s.io/v1", "--token-file", empty); err == nil {
		t.Fatal("an empty token file gave a credential")
	}
}

func TestCredentialNamesWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		args       []string
		want       string
	}{
		{"an ExecCredential version it does not speak", `{"apiVersion":"client.authentication.k8s.io/v2","kind":"ExecCredential"}`,
			[]string{"--token", "t"}, `ExecCredential "client.authentication.k8s.io/v2"`},
		{"no ExecCredential", `not json`, []string{"--token", "t"}, "KUBERNETES_EXEC_INFO is not an ExecCredential"},
		{"a missing token file", "", []string{"--token-file", "/nonexistent/token"}, "read --token-file"},
		{"an argument", "", []string{"cluster1"}, "credential takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(execInfoEnv, tc.info)
			code, _, errOut := plugin(append([]string{"credential"}, tc.args...)...)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want an error containing %q", code, errOut, tc.want)
			}
		})
	}
}
