// Command k8svalidate checks codefleet's Kubernetes manifests (deploy/k8s)
// offline, the way the API server and KEDA would, plus what only codefleet
// knows:
//
//   - every YAML document is decoded strictly into the upstream Go types
//     (k8s.io/api, KEDA's apis/keda/v1alpha1): unknown or duplicate fields
//     are errors, as with `kubectl apply --validate=strict`;
//   - each kustomization is rendered with kustomize's own library (krusty):
//     the default one and the one with the hpa component;
//   - each Kubernetes object is defaulted, converted and validated by the
//     API server's create path (k8s.io/kubernetes registry strategies:
//     PrepareForCreate, Validate, declarative validation, metadata);
//   - KEDA objects get KEDA's own checks (replica bounds, fallback,
//     triggers) and the Kafka trigger's metadata is checked against the
//     `keda:"..."` tags of the Kafka scaler in the KEDA module itself;
//   - cross-references: ports, probes, ConfigMap and Secret keys, the
//     worker.conf keys and values against docs/CONFIGURATION-worker.md,
//     the shutdown timing, memory sizing, the securityContext the sandbox
//     needs, autoscaler targets and partitions, prometheus-adapter rules.
//
// Usage (tests/k8s/run.sh runs it):
//
//	go run . -repo ../../..   # prints one line per check, then "N passed, N failed"
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	repo := flag.String("repo", "", "repository root (default: three levels above this directory)")
	kedaDir := flag.String("keda-dir", "", "directory of the github.com/kedacore/keda/v2 module (default: go list -m)")
	verbose := flag.Bool("v", false, "print warnings of passing checks too")
	flag.Parse()
	root := *repo
	if root == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		root = filepath.Join(wd, "..", "..", "..")
	}
	opts := Options{
		K8sDir:   filepath.Join(root, "deploy", "k8s"),
		ConfDocs: filepath.Join(root, "docs", "CONFIGURATION-worker.md"),
		KedaDir:  *kedaDir,
	}
	rep := Validate(opts)
	passed, failed := 0, 0
	for _, c := range rep.Checks {
		if len(c.Errs) == 0 {
			passed++
			fmt.Printf("ok   %s\n", c.Name)
		} else {
			failed++
			fmt.Printf("FAIL %s\n", c.Name)
			for _, e := range c.Errs {
				fmt.Printf("       %s\n", e)
			}
		}
		if len(c.Errs) > 0 || *verbose {
			for _, w := range c.Warnings {
				fmt.Printf("       warning: %s\n", w)
			}
		}
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
