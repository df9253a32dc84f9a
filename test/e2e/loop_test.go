//go:build e2e

package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
)

// report writes a loop's figures to the spec's output.
func report(what string, ok int, failures []requestloop.Failure) {
	AddReportEntry(what, fmt.Sprintf("%d answered, %d failed, failures over %s", ok, len(failures),
		requestloop.Gap(failures).Round(10*time.Millisecond)))
	for _, f := range failures {
		GinkgoWriter.Printf("    %s %s\n", f.At.Format("15:04:05.000"), f.Err)
	}
}
