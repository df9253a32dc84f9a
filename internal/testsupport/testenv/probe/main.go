// Command probe is the workload of the tests on real clusters, run in a pod (testenv.ProbeImage): it serves GET
// /healthz, GET /resolve?name=N (a lookup through the pod's DNS), GET /dial?addr=A (a TCP dial from the pod's
// network), and logs each request ("GET /healthz" first). 'probe echo WORDS' prints WORDS and exits, and 'probe cat'
// copies its input to its output until the input ends, for kubectl exec.
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "echo" {
		fmt.Println(strings.Join(os.Args[2:], " "))
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "cat" {
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			log.Fatal(err)
		}
		return
	}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Printf("%s %s", r.Method, r.URL.RequestURI())
		http.DefaultServeMux.ServeHTTP(w, r)
	})
	http.HandleFunc("/resolve", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		addrs, err := net.LookupHost(name)
		log.Printf("resolve %s: %v %v", name, addrs, err)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, strings.Join(addrs, " "))
	})
	http.HandleFunc("/dial", func(w http.ResponseWriter, r *http.Request) {
		addr := r.URL.Query().Get("addr")
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		log.Printf("dial %s: %v", addr, err)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn.Close()
		fmt.Fprintln(w, "connected")
	})
	log.Print("listening on :8080")
	log.Fatal(http.ListenAndServe(":8080", logged)) //nolint:gosec // a test workload
}
