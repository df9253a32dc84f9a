package clusterproxy

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// answers is a RoundTripper that answers each request with the next of its bodies, cut short (io.ErrUnexpectedEOF)
// where cutAt says so.
type answers struct {
	bodies []string
	cutAt  []bool
	sent   int
}

func (a *answers) RoundTrip(*http.Request) (*http.Response, error) {
	i := a.sent
	a.sent++
	var body io.Reader = strings.NewReader(a.bodies[i])
	if a.cutAt[i] {
		body = io.MultiReader(body, errReader{io.ErrUnexpectedEOF})
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(body)}, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestResendCutSendsOnlyWhatMayBeSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name, method, url string
		body              io.Reader
		header            string
		answers           *answers
		want              string
		wantErr           error
		sent              int
	}{
		{name: "a cut GET is sent again", method: http.MethodGet, url: "/api/v1/pods",
			answers: &answers{bodies: []string{"half", "whole answer"}, cutAt: []bool{true, false}}, want: "whole answer", sent: 2},
		{name: "three cuts in a row reach the caller", method: http.MethodGet, url: "/api/v1/pods",
			answers: &answers{bodies: []string{"a", "b", "c", "d"}, cutAt: []bool{true, true, true, false}}, wantErr: io.ErrUnexpectedEOF, sent: 3},
		{name: "a POST is not sent again", method: http.MethodPost, url: "/api/v1/namespaces/ns/pods", body: strings.NewReader("{}"),
			answers: &answers{bodies: []string{"half", "whole"}, cutAt: []bool{true, false}}, wantErr: io.ErrUnexpectedEOF, sent: 1},
		{name: "a watch streams", method: http.MethodGet, url: "/api/v1/pods?watch=true",
			answers: &answers{bodies: []string{"event", "again"}, cutAt: []bool{true, false}}, wantErr: io.ErrUnexpectedEOF, sent: 1},
		{name: "followed logs stream", method: http.MethodGet, url: "/api/v1/namespaces/ns/pods/p/log?follow=true",
			answers: &answers{bodies: []string{"line", "again"}, cutAt: []bool{true, false}}, wantErr: io.ErrUnexpectedEOF, sent: 1},
		{name: "an upgrade passes", method: http.MethodGet, url: "/api/v1/namespaces/ns/pods/p/exec", header: "SPDY/3.1",
			answers: &answers{bodies: []string{"x", "y"}, cutAt: []bool{true, false}}, wantErr: io.ErrUnexpectedEOF, sent: 1},
		{name: "an answer past the limit is handed on as it comes", method: http.MethodGet, url: "/api/v1/pods",
			answers: &answers{bodies: []string{"0123456789abcdef"}, cutAt: []bool{false}}, want: "0123456789abcdef", sent: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			req := httptest.NewRequest(tc.method, "https://c1"+tc.url, tc.body)
			if tc.header != "" {
				req.Header.Set("Upgrade", tc.header)
			}
			resp, err := resendCut{next: tc.answers, limit: 8}.RoundTrip(req)
			if err == nil {
				var b []byte
				b, err = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err == nil {
					g.Expect(string(b)).To(Equal(tc.want))
				}
			}
			if tc.wantErr != nil {
				g.Expect(errors.Is(err, tc.wantErr)).To(BeTrue(), "%v", err)
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(tc.answers.sent).To(Equal(tc.sent))
		})
	}
}
