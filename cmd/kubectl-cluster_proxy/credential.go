package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	clientauthv1beta1 "k8s.io/client-go/pkg/apis/clientauthentication/v1beta1"
)

// execInfoEnv is where client-go passes an exec credential plugin its request (and, with provideClusterInfo, the
// cluster it is for).
const execInfoEnv = "KUBERNETES_EXEC_INFO"

// credentialCommand is a client-go exec credential plugin: it prints an ExecCredential with the bearer token the
// user-server takes, for a kubeconfig or a ClusterProfile access provider whose server is the user-server.
type credentialCommand struct {
	globals
	token, tokenFile string
}

func (c *credentialCommand) register(fs *flag.FlagSet) {
	fs.StringVar(&c.token, "token", "", "the bearer token to hand out (default: --token-file, else the hub kubeconfig's "+
		"token, in a pod its service account's)")
	fs.StringVar(&c.tokenFile, "token-file", "", "read the token from this file on every call (a projected service "+
		"account token that the kubelet rotates)")
}

func (c *credentialCommand) run(stdout io.Writer) error {
	apiVersion, err := execAPIVersion(os.Getenv(execInfoEnv))
	if err != nil {
		return err
	}
	token := c.token
	if token == "" && c.tokenFile != "" {
		raw, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return fmt.Errorf("read --token-file: %w", err)
		}
		token = strings.TrimSpace(string(raw))
		if token == "" {
			return fmt.Errorf("--token-file %s is empty", c.tokenFile)
		}
	}
	if token == "" {
		cfg, err := c.hubConfig()
		if err != nil {
			return err
		}
		if token, err = configToken(cfg.BearerToken, cfg.BearerTokenFile); err != nil {
			return err
		}
	}
	if token == "" {
		return fmt.Errorf("no token: pass --token or --token-file with a hub service account token or a token valid " +
			"on the managed cluster (the hub kubeconfig has none to reuse)")
	}
	var out any
	switch apiVersion {
	case clientauthv1beta1.SchemeGroupVersion.String():
		out = &clientauthv1beta1.ExecCredential{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "ExecCredential"},
			Status: &clientauthv1beta1.ExecCredentialStatus{Token: token}}
	default:
		out = &clientauthv1.ExecCredential{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "ExecCredential"},
			Status: &clientauthv1.ExecCredentialStatus{Token: token}}
	}
	return json.NewEncoder(stdout).Encode(out)
}

// execAPIVersion is the ExecCredential version client-go asked for in KUBERNETES_EXEC_INFO; v1 when run by hand.
func execAPIVersion(info string) (string, error) {
	if info == "" {
		return clientauthv1.SchemeGroupVersion.String(), nil
	}
	var req metav1.TypeMeta
	if err := json.Unmarshal([]byte(info), &req); err != nil {
		return "", fmt.Errorf("%s is not an ExecCredential: %w", execInfoEnv, err)
	}
	switch req.APIVersion {
	case clientauthv1.SchemeGroupVersion.String(), clientauthv1beta1.SchemeGroupVersion.String():
		return req.APIVersion, nil
	default:
		return "", fmt.Errorf("%s asks for ExecCredential %q; this plugin speaks %s and %s", execInfoEnv, req.APIVersion,
			clientauthv1.SchemeGroupVersion, clientauthv1beta1.SchemeGroupVersion)
	}
}
