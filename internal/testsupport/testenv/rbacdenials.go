package testenv

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// forbiddenMarker is in the API server's message for a request that RBAC denied: `... is forbidden: User "..." cannot
// create resource ...`.
const forbiddenMarker = "is forbidden: User "

// rbacDenials returns the errors of the log lines (controller-runtime's JSON, or plain text) that report a request the
// API server refused for want of a permission.
func rbacDenials(log io.Reader) ([]string, error) {
	var out []string
	r := bufio.NewReader(log)
	for {
		line, err := r.ReadString('\n') // a line may carry a stack trace: no length limit
		if strings.Contains(line, forbiddenMarker) {
			var entry struct{ Error string }
			if json.Unmarshal([]byte(line), &entry) == nil && strings.Contains(entry.Error, forbiddenMarker) {
				line = entry.Error
			}
			out = append(out, strings.TrimSpace(line))
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// CheckManagerRBAC fails when the log at logPath, the manager's, shows a request that RBAC denied. A manager run
// with DeployedManagerKubeconfig has the rules of config/rbac, so such a request is a permission the shipped
// ClusterRole lacks, even when nothing else noticed (an event dropped, a retry that later succeeded).
func CheckManagerRBAC(logPath string) error {
	f, err := os.Open(logPath)
	if err != nil {
		return fmt.Errorf("read the manager's log: %w", err)
	}
	defer f.Close()
	denials, err := rbacDenials(f)
	if err != nil {
		return fmt.Errorf("read the manager's log %s: %w", logPath, err)
	}
	if len(denials) == 0 {
		return nil
	}
	return fmt.Errorf("RBAC denied the manager %d requests (see %s): add the permission to config/rbac with a "+
		"+kubebuilder:rbac marker; the first: %s", len(denials), logPath, denials[0])
}
