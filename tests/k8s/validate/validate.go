package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Options says where the manifests and the configuration reference are.
type Options struct {
	K8sDir   string // deploy/k8s
	ConfDocs string // docs/CONFIGURATION-worker.md
	KedaDir  string // the KEDA module's directory; empty: go list -m
}

// Check is one named check; it passed when Errs is empty.
type Check struct {
	Name     string
	Errs     []string
	Warnings []string
}

// Report lists the checks in the order they ran.
type Report struct{ Checks []Check }

func (r *Report) add(name string, errs []string, warnings ...string) {
	r.Checks = append(r.Checks, Check{Name: name, Errs: errs, Warnings: warnings})
}

// Failed returns every error message, prefixed with its check's name.
func (r *Report) Failed() []string {
	var out []string
	for _, c := range r.Checks {
		for _, e := range c.Errs {
			out = append(out, c.Name+": "+e)
		}
	}
	return out
}

// object is one decoded manifest document.
type object struct {
	APIVersion, Kind, Name string
	Annotations            map[string]string
	Obj                    any // a pointer to the upstream type
}

func (o object) id() string { return o.Kind + "/" + o.Name }

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// newTyped returns an empty upstream object for apiVersion/kind.
func newTyped(apiVersion, kind string) (any, bool) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1 Secret":
		return &corev1.Secret{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "keda.sh/v1alpha1 ScaledObject":
		return &kedav1alpha1.ScaledObject{}, true
	case "keda.sh/v1alpha1 TriggerAuthentication":
		return &kedav1alpha1.TriggerAuthentication{}, true
	}
	return nil, false
}

// decodeStrict decodes one YAML document into its upstream type; unknown
// and duplicate fields are errors.
func decodeStrict(doc []byte) (object, error) {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return object{}, fmt.Errorf("not YAML: %v", err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return object{}, fmt.Errorf("apiVersion and kind are required")
	}
	typed, ok := newTyped(tm.APIVersion, tm.Kind)
	if !ok {
		return object{}, fmt.Errorf("%s %s: not a kind this validator knows (add it to newTyped)", tm.APIVersion, tm.Kind)
	}
	// YAML to JSON refusing duplicate keys, then JSON into the type
	// refusing unknown and duplicate fields, with their paths (what the
	// API server's strict field validation reports).
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return object{}, fmt.Errorf("%s/%s: %v", tm.Kind, tm.Metadata.Name, err)
	}
	strict, err := kjson.UnmarshalStrict(js, typed)
	if err != nil {
		return object{}, fmt.Errorf("%s/%s: %v", tm.Kind, tm.Metadata.Name, err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return object{}, fmt.Errorf("%s/%s: %s", tm.Kind, tm.Metadata.Name, strings.Join(msgs, "; "))
	}
	return object{APIVersion: tm.APIVersion, Kind: tm.Kind, Name: tm.Metadata.Name,
		Annotations: tm.Metadata.Annotations, Obj: typed}, nil
}

// splitDocs splits a multi-document YAML file.
func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if strings.TrimSpace(stripComments(cur.String())) != "" {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if strings.TrimRight(line, " \t\r\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Files under deploy/k8s that are not Kubernetes objects.
const adapterValues = "prometheus-adapter-values.yaml"

// Validate runs every check.
func Validate(o Options) *Report {
	rep := &Report{}
	ref, err := loadConfReference(o.ConfDocs)
	rep.add("reference: worker configuration keys from "+filepath.Base(o.ConfDocs), errList(err))
	if err != nil {
		return rep
	}
	kedaDir := o.KedaDir
	if kedaDir == "" {
		kedaDir, err = kedaModuleDir()
	}
	var kafkaTags map[string]kedaTag
	if err == nil {
		kafkaTags, err = loadKafkaScalerTags(kedaDir)
	}
	rep.add("reference: KEDA kafka scaler metadata from the KEDA module", errList(err))

	// 1. Every file, strictly, as written.
	files, kusts := rawFiles(rep, o.K8sDir)

	// 2. Every manifest file belongs to some kustomization.
	rep.add("kustomizations list every manifest", orphanFiles(o.K8sDir, files, kusts))

	// 3. The variants, rendered and checked as a whole.
	adapter, adapterErr := loadAdapterRules(filepath.Join(o.K8sDir, "hpa", adapterValues))
	rep.add("hpa/"+adapterValues+": prometheus-adapter rules", errList(adapterErr))
	for _, v := range variants(o.K8sDir) {
		objs, err := render(o.K8sDir, v)
		rep.add(fmt.Sprintf("[%s] kustomize build", v.name), errList(err))
		if err != nil {
			continue
		}
		kinds := make([]string, 0, len(objs))
		for _, ob := range objs {
			kinds = append(kinds, ob.id())
		}
		sort.Strings(kinds)
		rep.add(fmt.Sprintf("[%s] renders %s", v.name, strings.Join(kinds, " ")), missingKinds(objs, v.wantKinds))
		for _, ob := range objs {
			if ob.APIVersion == "keda.sh/v1alpha1" {
				errs := kedaValidate(ob, kafkaTags)
				rep.add(fmt.Sprintf("[%s] KEDA validation %s", v.name, ob.id()), errs)
				continue
			}
			errs, warns := upstreamValidate(ob)
			rep.add(fmt.Sprintf("[%s] API server validation %s", v.name, ob.id()), errs, warns...)
		}
		crossChecks(rep, v.name, objs, ref, adapter)
	}
	return rep
}

func errList(err error) []string {
	if err == nil {
		return nil
	}
	return []string{err.Error()}
}

// rawFiles decodes every YAML file under dir strictly and returns the
// manifest files and the kustomization files.
func rawFiles(rep *Report, dir string) (manifests, kusts []string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			rep.add("read "+p, errList(err))
			return nil
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			rep.add("read "+rel, errList(err))
			return nil
		}
		switch filepath.Base(p) {
		case "kustomization.yaml", "kustomization.yml", "Kustomization":
			kusts = append(kusts, p)
			var k kusttypes.Kustomization
			err := yaml.UnmarshalStrict(data, &k)
			if err == nil && k.Kind != kusttypes.KustomizationKind && k.Kind != kusttypes.ComponentKind {
				err = fmt.Errorf("kind %q is neither Kustomization nor Component", k.Kind)
			}
			rep.add("strict decoding "+rel, errList(err))
			return nil
		case adapterValues:
			return nil // checked by loadAdapterRules
		}
		manifests = append(manifests, p)
		docs := splitDocs(data)
		if len(docs) == 0 {
			rep.add("strict decoding "+rel, []string{"no YAML documents"})
		}
		for i, doc := range docs {
			ob, err := decodeStrict(doc)
			name := fmt.Sprintf("strict decoding %s#%d", rel, i+1)
			if err == nil {
				name += " " + ob.id()
			}
			rep.add(name, errList(err))
		}
		return nil
	})
	return manifests, kusts
}

// orphanFiles: manifests that no kustomization lists would never be applied.
func orphanFiles(dir string, manifests, kusts []string) []string {
	listed := map[string]bool{}
	for _, k := range kusts {
		data, err := os.ReadFile(k)
		if err != nil {
			continue
		}
		var kt kusttypes.Kustomization
		if yaml.Unmarshal(data, &kt) != nil {
			continue
		}
		for _, r := range kt.Resources {
			listed[filepath.Clean(filepath.Join(filepath.Dir(k), r))] = true
		}
	}
	var errs []string
	for _, m := range manifests {
		if !listed[filepath.Clean(m)] {
			rel, _ := filepath.Rel(dir, m)
			errs = append(errs, rel+" is in no kustomization's resources")
		}
	}
	return errs
}

type variant struct {
	name       string
	components []string // relative to deploy/k8s
	wantKinds  []string
}

func variants(dir string) []variant {
	base := []string{"ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"}
	return []variant{
		{name: "default (KEDA)", wantKinds: append(append([]string{}, base...), "ScaledObject", "TriggerAuthentication")},
		{name: "hpa component", components: []string{"hpa"}, wantKinds: append(append([]string{}, base...), "HorizontalPodAutoscaler")},
	}
}

func missingKinds(objs []object, want []string) []string {
	have := map[string]bool{}
	for _, o := range objs {
		have[o.Kind] = true
	}
	var errs []string
	for _, k := range want {
		if !have[k] {
			errs = append(errs, "no "+k+" rendered")
		}
	}
	return errs
}

// render builds deploy/k8s (plus components) with kustomize's library, in
// an in-memory copy of the tree, and decodes each resource strictly.
func render(dir string, v variant) ([]object, error) {
	fs := filesys.MakeFsInMemory()
	const root = "/repo/deploy/k8s"
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return fs.WriteFile(filepath.Join(root, rel), data)
	})
	if err != nil {
		return nil, err
	}
	target := root
	if len(v.components) > 0 {
		target = "/repo/overlay"
		var b strings.Builder
		b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../deploy/k8s\ncomponents:\n")
		for _, c := range v.components {
			b.WriteString("  - ../deploy/k8s/" + c + "\n")
		}
		if err := fs.WriteFile(target+"/kustomization.yaml", []byte(b.String())); err != nil {
			return nil, err
		}
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(fs, target)
	if err != nil {
		return nil, err
	}
	var objs []object
	var errs []string
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		ob, err := decodeStrict(doc)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		objs = append(objs, ob)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return objs, nil
}

// kedaModuleDir asks the go command where the KEDA module this program was
// built with lives (it is in the module cache after the build).
func kedaModuleDir() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kedacore/keda/v2")
	if d := os.Getenv("K8SVALIDATE_MODULE_DIR"); d != "" {
		cmd.Dir = d
	}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/kedacore/keda/v2 (run from tests/k8s/validate, or pass -keda-dir): %v", err)
	}
	d := strings.TrimSpace(string(out))
	if d == "" {
		return "", fmt.Errorf("go list -m github.com/kedacore/keda/v2: no directory (not downloaded?)")
	}
	return d, nil
}
