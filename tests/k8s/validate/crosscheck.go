package main

import (
	"fmt"
	"net"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// ---- prometheus-adapter rules (hpa/prometheus-adapter-values.yaml) ----

type adapterRule struct {
	SeriesQuery string `json:"seriesQuery"`
	Resources   struct {
		Overrides map[string]struct {
			Group    string `json:"group,omitempty"`
			Resource string `json:"resource"`
		} `json:"overrides,omitempty"`
		Template string `json:"template,omitempty"`
	} `json:"resources"`
	Name struct {
		Matches string `json:"matches"`
		As      string `json:"as,omitempty"`
	} `json:"name"`
	MetricsQuery  string `json:"metricsQuery"`
	SeriesFilters []struct {
		Is    string `json:"is,omitempty"`
		IsNot string `json:"isNot,omitempty"`
	} `json:"seriesFilters,omitempty"`
}

type adapterRules struct {
	Custom, External map[string]bool // metric names served
}

func loadAdapterRules(p string) (*adapterRules, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var v struct {
		Rules struct {
			Default  *bool         `json:"default,omitempty"`
			Custom   []adapterRule `json:"custom,omitempty"`
			External []adapterRule `json:"external,omitempty"`
			Resource any           `json:"resource,omitempty"`
		} `json:"rules"`
	}
	if err := yaml.UnmarshalStrict(data, &v); err != nil {
		return nil, err
	}
	ar := &adapterRules{Custom: map[string]bool{}, External: map[string]bool{}}
	add := func(kind string, rules []adapterRule, into map[string]bool) error {
		for i, r := range rules {
			if r.SeriesQuery == "" || r.MetricsQuery == "" {
				return fmt.Errorf("rules.%s[%d]: seriesQuery and metricsQuery are required", kind, i)
			}
			name := r.Name.As
			if name == "" {
				name = strings.Trim(r.Name.Matches, "^$")
			}
			metric := strings.SplitN(strings.TrimSpace(r.SeriesQuery), "{", 2)[0]
			if !strings.HasPrefix(r.Name.Matches, "^") || !strings.Contains(r.Name.Matches, metric) {
				return fmt.Errorf("rules.%s[%d]: name.matches %q does not select the series %s", kind, i, r.Name.Matches, metric)
			}
			into[name] = true
		}
		return nil
	}
	if err := add("custom", v.Rules.Custom, ar.Custom); err != nil {
		return nil, err
	}
	if err := add("external", v.Rules.External, ar.External); err != nil {
		return nil, err
	}
	return ar, nil
}

// ---- the rendered set ----

type objSet struct {
	deployments []*appsv1.Deployment
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	netpols     []*networkingv1.NetworkPolicy
	sos         []*kedav1alpha1.ScaledObject
	tas         map[string]*kedav1alpha1.TriggerAuthentication
}

func collect(objs []object) *objSet {
	s := &objSet{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		tas: map[string]*kedav1alpha1.TriggerAuthentication{}}
	for _, o := range objs {
		switch x := o.Obj.(type) {
		case *appsv1.Deployment:
			s.deployments = append(s.deployments, x)
		case *corev1.ConfigMap:
			s.configMaps[x.Name] = x
		case *corev1.Secret:
			s.secrets[x.Name] = x
		case *corev1.Service:
			s.services = append(s.services, x)
		case *policyv1.PodDisruptionBudget:
			s.pdbs = append(s.pdbs, x)
		case *autoscalingv2.HorizontalPodAutoscaler:
			s.hpas = append(s.hpas, x)
		case *networkingv1.NetworkPolicy:
			s.netpols = append(s.netpols, x)
		case *kedav1alpha1.ScaledObject:
			s.sos = append(s.sos, x)
		case *kedav1alpha1.TriggerAuthentication:
			s.tas[x.Name] = x
		}
	}
	return s
}

func (s *objSet) secretHas(name, key string) error {
	sec, ok := s.secrets[name]
	if !ok {
		return fmt.Errorf("Secret %q is not among the manifests", name)
	}
	if _, ok := sec.Data[key]; ok {
		return nil
	}
	if _, ok := sec.StringData[key]; ok {
		return nil
	}
	return fmt.Errorf("Secret %q has no key %q", name, key)
}

func (s *objSet) secretValue(name, key string) (string, bool) {
	sec, ok := s.secrets[name]
	if !ok {
		return "", false
	}
	if v, ok := sec.StringData[key]; ok {
		return v, true
	}
	if v, ok := sec.Data[key]; ok {
		return string(v), true
	}
	return "", false
}

func workerContainer(d *appsv1.Deployment) *corev1.Container {
	cs := d.Spec.Template.Spec.Containers
	for i := range cs {
		if cs[i].Name == "worker" {
			return &cs[i]
		}
	}
	if len(cs) > 0 {
		return &cs[0]
	}
	return nil
}

func labelsMatch(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The sandbox's capability needs, measured by taking each away
// (docs/OPERATIONS.md, "Kubernetes").
var sandboxCaps = []string{"SYS_ADMIN", "SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE"}

// Credentials that belong in the Secret, never in the ConfigMap.
var secretKeys = []string{"redis-password", "otlp-headers", "kafka.sasl.password", "kafka.ssl.key.password",
	"kafka.ssl.keystore.password", "kafka.sasl.oauthbearer.client.secret"}

func crossChecks(rep *Report, vname string, objs []object, ref *confReference, adapter *adapterRules) {
	s := collect(objs)
	annos := map[string]map[string]string{}
	for _, o := range objs {
		annos[o.id()] = o.Annotations
	}
	chk := func(name string, errs []string, warns ...string) {
		rep.add(fmt.Sprintf("[%s] %s", vname, name), errs, warns...)
	}
	if len(s.deployments) != 1 {
		chk("one worker Deployment", []string{fmt.Sprintf("%d Deployments rendered", len(s.deployments))})
		return
	}
	d := s.deployments[0]
	pod := &d.Spec.Template.Spec
	c := workerContainer(d)
	if c == nil {
		chk("worker container", []string{"the Deployment has no containers"})
		return
	}
	did := "Deployment/" + d.Name

	// -- the configuration file comes from the ConfigMap --
	wc, errs := workerConfFromPod(s, pod, c, ref)
	chk(did+": --config file from a ConfigMap, every key and value valid (docs/CONFIGURATION-worker.md)", errs)
	if wc == nil {
		return
	}

	// -- CODEFLEET_WORKER_* variables the worker accepts --
	errs = nil
	var idFromPod bool
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, envPrefix) {
			continue
		}
		key := envKey(ref, e.Name)
		if key == "" {
			errs = append(errs, fmt.Sprintf("env %s names no configuration key: the worker refuses to start", e.Name))
		}
		if key == "worker-id" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			idFromPod = true
		}
	}
	if !idFromPod {
		errs = append(errs, "CODEFLEET_WORKER_WORKER_ID should come from the pod's name (fieldRef metadata.name): unique and recognisable per worker")
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		errs = append(errs, "enableServiceLinks must be false: a Service named codefleet-worker* in the namespace injects CODEFLEET_WORKER_*_PORT variables, which the worker refuses (unknown setting)")
	}
	chk(did+": environment names only configuration keys (service links off, worker-id from the pod)", errs)

	// -- Secret references, credentials kept out of the ConfigMap --
	errs = nil
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			r := e.ValueFrom.SecretKeyRef
			if err := s.secretHas(r.Name, r.Key); err != nil {
				errs = append(errs, fmt.Sprintf("env %s: %v", e.Name, err))
			}
		}
		if key := envKey(ref, e.Name); key != "" && isCredentialKey(key) && key != "kafka.sasl.username" {
			errs = append(errs, fmt.Sprintf("env %s: credentials never go through the worker's environment (docs/SECURITY.md): put %s in the Secret's credentials file", e.Name, key))
		}
		if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			r := e.ValueFrom.ConfigMapKeyRef
			if cm, ok := s.configMaps[r.Name]; !ok {
				errs = append(errs, fmt.Sprintf("env %s: ConfigMap %q is not among the manifests", e.Name, r.Name))
			} else if _, ok := cm.Data[r.Key]; !ok {
				errs = append(errs, fmt.Sprintf("env %s: ConfigMap %q has no key %q", e.Name, r.Name, r.Key))
			}
		}
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil {
			if _, ok := s.secrets[ef.SecretRef.Name]; !ok {
				errs = append(errs, fmt.Sprintf("envFrom: Secret %q is not among the manifests", ef.SecretRef.Name))
			}
		}
	}
	for _, k := range secretKeys {
		if _, ok := wc.Values[k]; ok {
			errs = append(errs, fmt.Sprintf("worker.conf sets %s: a credential belongs in the Secret (its credentials file)", k))
		}
	}
	chk(did+": Secret references resolve, credentials only in the Secret", errs)

	// -- probes and the metrics port --
	chk(did+": probes and prometheus.io annotations reach metrics-listen", probeErrors(d, c, wc, ref))

	// -- graceful termination --
	chk(did+": terminationGracePeriodSeconds > shutdown-grace + max(shutdown-kafka-timeout, group session) + 1 s", shutdownErrors(pod, wc, ref))

	// -- filesystem: work-root on a Memory emptyDir, writable paths --
	chk(did+": work-root on an emptyDir (medium: Memory), writable paths mounted", fsErrors(pod, c, wc, ref))

	// -- memory sizing --
	errs, warns := memoryErrors(pod, c, wc, ref)
	chk(did+": memory limit holds worker + compile-cache + slots x execution", errs, warns...)

	// -- the securityContext the sandbox needs --
	errs, warns = securityErrors(pod, d.Spec.Template.Annotations, c, wc, ref)
	chk(did+": securityContext gives the sandbox what it needs", errs, warns...)

	// -- Services and PDBs select the worker pods --
	podLabels := d.Spec.Template.Labels
	for _, svc := range s.services {
		var errs []string
		if !labelsMatch(svc.Spec.Selector, podLabels) {
			errs = append(errs, "selector does not match the worker pods' labels")
		}
		for _, p := range svc.Spec.Ports {
			if _, err := resolvePort(c, p.TargetPort); err != nil && p.TargetPort.String() != "0" {
				errs = append(errs, fmt.Sprintf("port %s: targetPort %s: %v", p.Name, p.TargetPort.String(), err))
			}
		}
		chk("Service/"+svc.Name+": selects the worker pods, targetPort is a container port", errs)
	}
	for _, pdb := range s.pdbs {
		var errs []string
		if pdb.Spec.Selector == nil || !labelsMatch(pdb.Spec.Selector.MatchLabels, podLabels) {
			errs = append(errs, "selector does not match the worker pods' labels")
		}
		chk("PodDisruptionBudget/"+pdb.Name+": selects the worker pods", errs)
	}

	// -- who may connect: only the scraper, only to the metrics port --
	chk("NetworkPolicy: the worker pods admit connections only to the metrics port, only from selected peers",
		networkPolicyErrors(s, d, c, wc, ref))

	// -- autoscaling --
	targets := map[string][]string{}
	for _, so := range s.sos {
		id := "ScaledObject/" + so.Name
		errs := scaledObjectErrors(s, so, annos[id], d, wc, ref)
		chk(id+": target, authentication, trigger (brokers, group, topic) and partitions match the fleet", errs)
		targets[so.Spec.ScaleTargetRef.Name] = append(targets[so.Spec.ScaleTargetRef.Name], id)
	}
	for _, h := range s.hpas {
		id := "HorizontalPodAutoscaler/" + h.Name
		errs := hpaErrors(h, annos[id], d, adapter)
		chk(id+": target, partitions, metrics served by prometheus-adapter", errs)
		targets[h.Spec.ScaleTargetRef.Name] = append(targets[h.Spec.ScaleTargetRef.Name], id)
	}
	errs = nil
	for t, by := range targets {
		if len(by) > 1 {
			errs = append(errs, fmt.Sprintf("Deployment %s is scaled by %s: they would fight", t, strings.Join(by, " and ")))
		}
	}
	chk("at most one autoscaler per Deployment", errs)
}

// credentialKeys are the settings that may (and must) come from the Secret.
// kafka.sasl.username is not secret but travels with its password.
func isCredentialKey(k string) bool {
	if k == "kafka.sasl.username" {
		return true
	}
	for _, s := range secretKeys {
		if s == k {
			return true
		}
	}
	return false
}

// volumeFile resolves a file path inside container c to the ConfigMap or
// Secret key mounted there: its text, and what it is ("ConfigMap x key").
func volumeFile(s *objSet, pod *corev1.PodSpec, c *corev1.Container, file string) (text, kind, what string, vol *corev1.Volume, err error) {
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = m
		}
	}
	if mount == nil {
		return "", "", "", nil, fmt.Errorf("%s: no volume is mounted there", file)
	}
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == mount.Name {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil {
		return "", "", "", nil, fmt.Errorf("%s: volume %q is not among the pod's volumes", file, mount.Name)
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(file, strings.TrimSuffix(mount.MountPath, "/")), "/")
	if mount.SubPath != "" {
		rel = path.Join(mount.SubPath, rel)
	}
	keyOf := func(items []corev1.KeyToPath) string {
		if len(items) == 0 {
			return rel
		}
		for _, it := range items {
			if it.Path == rel {
				return it.Key
			}
		}
		return ""
	}
	switch {
	case vol.ConfigMap != nil:
		cm, ok := s.configMaps[vol.ConfigMap.Name]
		if !ok {
			return "", "", "", vol, fmt.Errorf("ConfigMap %q is not among the manifests", vol.ConfigMap.Name)
		}
		key := keyOf(vol.ConfigMap.Items)
		t, ok := cm.Data[key]
		if key == "" || !ok {
			return "", "", "", vol, fmt.Errorf("%s: ConfigMap %q provides no such file", file, cm.Name)
		}
		return t, "ConfigMap", "ConfigMap " + cm.Name + " " + key, vol, nil
	case vol.Secret != nil:
		key := keyOf(vol.Secret.Items)
		if err := s.secretHas(vol.Secret.SecretName, key); key == "" || err != nil {
			if err == nil {
				err = fmt.Errorf("%s: Secret %q provides no such file", file, vol.Secret.SecretName)
			}
			return "", "", "", vol, err
		}
		t, _ := s.secretValue(vol.Secret.SecretName, key)
		return t, "Secret", "Secret " + vol.Secret.SecretName + " " + key, vol, nil
	}
	return "", "", "", vol, fmt.Errorf("%s: volume %q is neither a ConfigMap nor a Secret", file, mount.Name)
}

var catRe = regexp.MustCompile(`(?m)^\s*cat\s+([^>\n]+?)\s*>\s*(\S+)\s*$`)

// workerConfFromPod finds --config FILE (or CODEFLEET_WORKER_CONFIG) and
// what it holds: a ConfigMap key mounted there, or a file the container's
// command makes on an emptyDir with `cat SETTINGS CREDENTIALS > FILE` from
// the ConfigMap's settings and the Secret's credentials (so credentials
// never pass through the environment).  The settings are returned; the
// credentials part is checked here: known keys, credentials only.
func workerConfFromPod(s *objSet, pod *corev1.PodSpec, c *corev1.Container, ref *confReference) (*workerConf, []string) {
	args := append(append([]string{}, c.Command...), c.Args...)
	file := ""
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			file = args[i+1]
		} else if strings.HasPrefix(a, "--config=") {
			file = strings.TrimPrefix(a, "--config=")
		}
	}
	if file == "" {
		for _, e := range c.Env {
			if e.Name == envPrefix+"CONFIG" {
				file = e.Value
			}
		}
	}
	if file == "" {
		return nil, []string{"neither --config FILE nor CODEFLEET_WORKER_CONFIG given"}
	}
	text, kind, what, vol, err := volumeFile(s, pod, c, file)
	if err == nil && kind == "ConfigMap" {
		wc, errs := parseWorkerConf(text, ref)
		for i := range errs {
			errs[i] = what + ": " + errs[i]
		}
		return wc, errs
	}
	if err == nil || vol == nil || vol.EmptyDir == nil {
		if err == nil {
			err = fmt.Errorf("--config %s: the settings come from a ConfigMap (credentials from the Secret)", file)
		}
		return nil, []string{"--config " + err.Error()}
	}
	// An emptyDir: the command must compose it.
	var sources []string
	for _, a := range c.Command {
		for _, m := range catRe.FindAllStringSubmatch(a, -1) {
			if m[2] == file {
				sources = strings.Fields(m[1])
			}
		}
	}
	if len(sources) == 0 {
		return nil, []string{fmt.Sprintf("--config %s is on emptyDir %q and the command does not compose it (cat SETTINGS CREDENTIALS > %s)", file, vol.Name, file)}
	}
	if vol.EmptyDir.Medium != corev1.StorageMediumMemory {
		return nil, []string{fmt.Sprintf("--config %s holds credentials: its emptyDir %q must be medium: Memory", file, vol.Name)}
	}
	var wc *workerConf
	var errs []string
	for i, src := range sources {
		t, k, w, v, err := volumeFile(s, pod, c, src)
		if err != nil {
			errs = append(errs, "--config "+file+" from "+err.Error())
			continue
		}
		part, perrs := parseWorkerConf(t, ref)
		for _, e := range perrs {
			errs = append(errs, w+": "+e)
		}
		if k == "ConfigMap" {
			if i+1 < len(sources) {
				errs = append(errs, fmt.Sprintf("--config %s: the credentials must come before the settings (settings ending in a [profile.x] section would take them as the profile's keys)", file))
			}
			if wc != nil {
				errs = append(errs, fmt.Sprintf("--config %s: composed of two ConfigMap files", file))
			}
			wc = part
			continue
		}
		if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0 {
			errs = append(errs, fmt.Sprintf("%s: mounted readable by others (defaultMode must be 0400)", w))
		}
		for key := range part.Values {
			if !isCredentialKey(key) {
				errs = append(errs, fmt.Sprintf("%s sets %s: settings belong in the ConfigMap, only credentials in the Secret", w, key))
			}
		}
	}
	if wc == nil {
		errs = append(errs, fmt.Sprintf("--config %s: no ConfigMap file among its sources", file))
		wc = &workerConf{Values: map[string]string{}, Lines: map[string]int{}}
	}
	return wc, errs
}

func resolvePort(c *corev1.Container, p intstr.IntOrString) (int32, error) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("no container port %s", p.String())
}

func probeErrors(d *appsv1.Deployment, c *corev1.Container, wc *workerConf, ref *confReference) []string {
	var errs []string
	listen := wc.get(ref, "metrics-listen")
	host, portStr, err := net.SplitHostPort(listen)
	if listen == "" || err != nil {
		return []string{fmt.Sprintf("metrics-listen %q: set it to 0.0.0.0:PORT (probes and Prometheus need it)", listen)}
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		errs = append(errs, fmt.Sprintf("metrics-listen %s: a loopback address is unreachable for the kubelet's probes and Prometheus", listen))
	}
	port, _ := strconv.Atoi(portStr)
	declared := false
	for _, cp := range c.Ports {
		if int(cp.ContainerPort) == port {
			declared = true
		}
	}
	if !declared {
		errs = append(errs, fmt.Sprintf("metrics-listen port %d is not a containerPort", port))
	}
	probes := []struct {
		name, path string
		p          *corev1.Probe
	}{{"startupProbe", "/healthz", c.StartupProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}}
	for _, pr := range probes {
		if pr.p == nil || pr.p.HTTPGet == nil {
			errs = append(errs, pr.name+": missing (an httpGet of "+pr.path+")")
			continue
		}
		if pr.p.HTTPGet.Path != pr.path {
			errs = append(errs, fmt.Sprintf("%s: path %s, the worker serves %s", pr.name, pr.p.HTTPGet.Path, pr.path))
		}
		got, err := resolvePort(c, pr.p.HTTPGet.Port)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: port %s: %v", pr.name, pr.p.HTTPGet.Port.String(), err))
		} else if int(got) != port {
			errs = append(errs, fmt.Sprintf("%s: port %d, metrics-listen is on %d", pr.name, got, port))
		}
	}
	if c.StartupProbe != nil && c.LivenessProbe != nil {
		if total := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold; total < 60 {
			errs = append(errs, fmt.Sprintf("startupProbe allows %d s: start-up (host probes, a zygote per slot) needs generous time, give it >= 60 s", total))
		}
	}
	a := d.Spec.Template.Annotations
	if a["prometheus.io/scrape"] == "true" && a["prometheus.io/port"] != strconv.Itoa(port) {
		errs = append(errs, fmt.Sprintf("annotation prometheus.io/port %q, metrics-listen is on %d", a["prometheus.io/port"], port))
	}
	if p := a["prometheus.io/path"]; p != "" && p != "/metrics" {
		errs = append(errs, fmt.Sprintf("annotation prometheus.io/path %q, the worker serves /metrics", p))
	}
	return errs
}

func shutdownErrors(pod *corev1.PodSpec, wc *workerConf, ref *confReference) []string {
	grace, err1 := parseDurationUS(wc.get(ref, "shutdown-grace"))
	kt, err2 := parseDurationUS(wc.get(ref, "shutdown-kafka-timeout"))
	if err1 != nil || err2 != nil {
		return []string{"shutdown-grace or shutdown-kafka-timeout unreadable"}
	}
	// What librdkafka may wait for a last commit: the classic session, or
	// under KIP-848 the consumers' socket.timeout.ms, both 6 s by default
	// (docs/RELIABILITY.md).
	session := int64(6_000_000)
	if v, ok := wc.Values["kafka.session.timeout.ms"]; ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return []string{"kafka.session.timeout.ms is not a number"}
		}
		session = ms * 1000
	}
	tail := kt
	if session > tail {
		tail = session
	}
	need := grace + tail + 1_000_000
	if pod.TerminationGracePeriodSeconds == nil {
		return []string{fmt.Sprintf("terminationGracePeriodSeconds unset (30 s default); the worker may take %.1f s", float64(need)/1e6)}
	}
	have := *pod.TerminationGracePeriodSeconds * 1_000_000
	if have <= need {
		return []string{fmt.Sprintf("terminationGracePeriodSeconds %d s <= shutdown-grace %.1f s + max(shutdown-kafka-timeout %.1f s, group session %.1f s) + 1 s: the kubelet would SIGKILL a draining worker",
			*pod.TerminationGracePeriodSeconds, float64(grace)/1e6, float64(kt)/1e6, float64(session)/1e6)}
	}
	return nil
}

func mountFor(c *corev1.Container, p string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		mp := strings.TrimSuffix(m.MountPath, "/")
		if (p == mp || strings.HasPrefix(p, mp+"/")) && (best == nil || len(mp) > len(best.MountPath)) {
			best = m
		}
	}
	return best
}

func volumeNamed(pod *corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

func fsErrors(pod *corev1.PodSpec, c *corev1.Container, wc *workerConf, ref *confReference) []string {
	var errs []string
	wr := wc.get(ref, "work-root")
	m := mountFor(c, wr)
	if m == nil {
		errs = append(errs, fmt.Sprintf("work-root %s is not on a volume", wr))
	} else if v := volumeNamed(pod, m.Name); v == nil || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		errs = append(errs, fmt.Sprintf("work-root %s: volume %q is not an emptyDir with medium Memory", wr, m.Name))
	} else if m.ReadOnly {
		errs = append(errs, fmt.Sprintf("work-root %s is mounted read-only", wr))
	}
	script := strings.Join(c.Command, " ")
	if c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem {
		for _, p := range []string{"/tmp"} {
			if m := mountFor(c, p); m == nil || m.ReadOnly {
				errs = append(errs, fmt.Sprintf("readOnlyRootFilesystem: %s needs a writable volume", p))
			}
		}
		for _, f := range strings.Fields(script) {
			if strings.HasPrefix(f, "/run/") && strings.HasSuffix(f, "/proc") {
				if m := mountFor(c, strings.TrimSuffix(f, "/proc")); m == nil || m.ReadOnly {
					errs = append(errs, fmt.Sprintf("readOnlyRootFilesystem: the entrypoint mounts %s, whose directory needs a writable volume", f))
				}
			}
		}
	}
	return errs
}

func memoryErrors(pod *corev1.PodSpec, c *corev1.Container, wc *workerConf, ref *confReference) ([]string, []string) {
	size := func(k string) int64 {
		v, err := parseSize(wc.get(ref, k))
		if err != nil {
			return 0
		}
		return v
	}
	slots, _ := strconv.ParseInt(wc.get(ref, "slots"), 10, 64)
	exec := size("sandbox-memory")
	if cm := size("compile-memory"); cm > exec {
		exec = cm
	}
	const mi = int64(1) << 20
	need := 256*mi + size("compile-cache") + slots*(exec+64*mi)
	var memDirs int64
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && v.EmptyDir.SizeLimit != nil {
			memDirs += v.EmptyDir.SizeLimit.Value()
		}
	}
	need += memDirs
	var errs, warns []string
	lim, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return []string{"no memory limit: size it (see configmap.yaml)"}, nil
	}
	if lim.Value() < need {
		errs = append(errs, fmt.Sprintf("limits.memory %s < 256Mi (worker) + compile-cache + %d slots x (max(sandbox-memory, compile-memory) + 64Mi zygote) + Memory emptyDirs = %s",
			lim.String(), slots, resource.NewQuantity(need, resource.BinarySI).String()))
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		errs = append(errs, "no cpu request")
	}
	if req, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
		errs = append(errs, "no memory request")
	} else if req.Cmp(lim) != 0 {
		warns = append(warns, "memory request below the limit: the node may not have the memory the executions are allowed")
	}
	return errs, warns
}

func securityErrors(pod *corev1.PodSpec, tmplAnnos map[string]string, c *corev1.Container, wc *workerConf, ref *confReference) ([]string, []string) {
	backends := wc.get(ref, "backends")
	needsSandbox := false
	for _, b := range strings.Split(backends, ",") {
		switch strings.TrimSpace(b) {
		case "sandbox", "wasm", "js", "container":
			needsSandbox = true
		}
	}
	if !needsSandbox {
		return nil, []string{"backends " + backends + ": no confinement, nothing to check"}
	}
	sc := c.SecurityContext
	if sc == nil {
		return []string{"no securityContext: the sandbox needs root, CAP_SYS_ADMIN and more (docs/OPERATIONS.md)"}, nil
	}
	if sc.Privileged != nil && *sc.Privileged {
		return nil, []string{"privileged: true works, but gives the pod every device and capability; see docs/OPERATIONS.md for the minimal set"}
	}
	var errs []string
	uid := sc.RunAsUser
	if uid == nil && pod.SecurityContext != nil {
		uid = pod.SecurityContext.RunAsUser
	}
	if uid == nil || *uid != 0 {
		errs = append(errs, "runAsUser must be 0: the worker maps host uids and mounts")
	}
	have := map[string]bool{}
	if sc.Capabilities != nil {
		for _, a := range sc.Capabilities.Add {
			have[strings.TrimPrefix(string(a), "CAP_")] = true
		}
		dropsAll := false
		for _, d := range sc.Capabilities.Drop {
			if strings.EqualFold(string(d), "ALL") {
				dropsAll = true
			}
		}
		if !dropsAll {
			errs = append(errs, "capabilities.drop should be [ALL], then add what the sandbox needs")
		}
	}
	for _, want := range sandboxCaps {
		if !have[want] {
			errs = append(errs, "capabilities.add lacks "+want+" (docs/OPERATIONS.md says what fails without it)")
		}
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil && pod.SecurityContext != nil {
		seccomp = pod.SecurityContext.SeccompProfile
	}
	if seccomp == nil || seccomp.Type == corev1.SeccompProfileTypeRuntimeDefault {
		errs = append(errs, "seccompProfile must be Unconfined (or a Localhost profile allowing pivot_root): the runtime's default refuses pivot_root")
	}
	aa := sc.AppArmorProfile
	if aa == nil && pod.SecurityContext != nil {
		aa = pod.SecurityContext.AppArmorProfile
	}
	if (aa == nil || aa.Type == corev1.AppArmorProfileTypeRuntimeDefault) &&
		tmplAnnos["container.apparmor.security.beta.kubernetes.io/"+c.Name] != "unconfined" {
		errs = append(errs, "appArmorProfile must be Unconfined (or Localhost): the runtime's default profile denies mount")
	}
	script := strings.Join(c.Command, " ")
	unmasked := sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount
	if !unmasked && !strings.Contains(script, "mount -t proc") {
		errs = append(errs, "the sandbox's /proc mount needs a fully visible proc in the pod: procMount Unmasked (needs hostUsers: false) or an entrypoint mounting one")
	}
	// The image's entrypoint (deploy/container/entrypoint.sh) remounts the
	// container's own cgroups read-write; a command of our own must run it
	// or do the same.
	usesEntrypoint := len(c.Command) == 0 || strings.Contains(script, "/codefleet-entrypoint ")
	if !usesEntrypoint && (!strings.Contains(script, "remount") || !strings.Contains(script, "cgroup")) {
		if v, _ := strconv.ParseBool(wc.get(ref, "sandbox-require-cgroups")); v {
			errs = append(errs, "sandbox-require-cgroups is set but nothing makes /sys/fs/cgroup writable (runtimes mount it read-only): the worker would not start")
		} else {
			errs = append(errs, "nothing makes /sys/fs/cgroup writable: executions would run without memory or process limits of their own")
		}
	}
	return errs, nil
}

func partitionsAnnotation(a map[string]string) (int32, error) {
	v, ok := a["codefleet/request-topic-partitions"]
	if !ok {
		return 0, fmt.Errorf("annotation codefleet/request-topic-partitions missing: say how many partitions the request topic has (the useful maximum of replicas)")
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("annotation codefleet/request-topic-partitions %q is not a positive number", v)
	}
	return int32(n), nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func scaledObjectErrors(s *objSet, so *kedav1alpha1.ScaledObject, annos map[string]string, d *appsv1.Deployment, wc *workerConf, ref *confReference) []string {
	var errs []string
	t := so.Spec.ScaleTargetRef
	if t == nil || t.Name != d.Name || (t.Kind != "" && t.Kind != "Deployment") || (t.APIVersion != "" && t.APIVersion != "apps/v1") {
		errs = append(errs, "scaleTargetRef does not name the worker Deployment "+d.Name)
	}
	parts, err := partitionsAnnotation(annos)
	if err != nil {
		errs = append(errs, err.Error())
	} else if so.Spec.MaxReplicaCount != nil && *so.Spec.MaxReplicaCount > parts {
		errs = append(errs, fmt.Sprintf("maxReplicaCount %d > %d partitions: the replicas beyond them would sit idle", *so.Spec.MaxReplicaCount, parts))
	}
	topics := map[string]bool{wc.get(ref, "request-topic"): true}
	for k, v := range wc.Values {
		if strings.HasPrefix(k, "profile.") && strings.HasSuffix(k, ".topic") {
			topics[v] = true
		}
	}
	for i, tr := range so.Spec.Triggers {
		if tr.Type != "kafka" {
			continue
		}
		md := tr.Metadata
		if got, want := splitList(md["bootstrapServers"]), splitList(wc.get(ref, "brokers")); strings.Join(got, ",") != strings.Join(want, ",") {
			errs = append(errs, fmt.Sprintf("triggers[%d].bootstrapServers %v, the workers' brokers %v", i, got, want))
		}
		if md["consumerGroup"] != wc.get(ref, "group") {
			errs = append(errs, fmt.Sprintf("triggers[%d].consumerGroup %q, the workers' group %q", i, md["consumerGroup"], wc.get(ref, "group")))
		}
		if tp, ok := md["topic"]; ok && !topics[tp] {
			errs = append(errs, fmt.Sprintf("triggers[%d].topic %q is not a topic the workers consume", i, tp))
		}
		if tr.AuthenticationRef != nil {
			name := tr.AuthenticationRef.Name
			ta, ok := s.tas[name]
			if !ok || (tr.AuthenticationRef.Kind != "" && tr.AuthenticationRef.Kind != "TriggerAuthentication") {
				errs = append(errs, fmt.Sprintf("triggers[%d].authenticationRef %q: no such TriggerAuthentication among the manifests", i, name))
				continue
			}
			params := map[string]string{}
			for _, r := range ta.Spec.SecretTargetRef {
				if err := s.secretHas(r.Name, r.Key); err != nil {
					errs = append(errs, fmt.Sprintf("TriggerAuthentication %s parameter %s: %v", name, r.Parameter, err))
				} else if v, ok := s.secretValue(r.Name, r.Key); ok {
					params[r.Parameter] = v
				}
			}
			errs = append(errs, kafkaAuthConsistency(params, wc)...)
		}
	}
	return errs
}

// kafkaAuthConsistency: KEDA must speak to the broker as the workers do.
func kafkaAuthConsistency(params map[string]string, wc *workerConf) []string {
	var errs []string
	proto := strings.ToUpper(wc.Values["kafka.security.protocol"])
	if proto == "" {
		proto = "PLAINTEXT"
	}
	wantSasl := "none"
	if strings.HasPrefix(proto, "SASL") {
		switch strings.ToUpper(wc.Values["kafka.sasl.mechanisms"]) {
		case "", "GSSAPI":
			wantSasl = "gssapi"
		case "PLAIN":
			wantSasl = "plaintext"
		case "SCRAM-SHA-256":
			wantSasl = "scram_sha256"
		case "SCRAM-SHA-512":
			wantSasl = "scram_sha512"
		case "OAUTHBEARER":
			wantSasl = "oauthbearer"
		}
	}
	if v, ok := params["sasl"]; ok && v != wantSasl {
		errs = append(errs, fmt.Sprintf("KEDA sasl %q, but the workers use security.protocol %s with mechanism %q (KEDA: %q)", v, proto, wc.Values["kafka.sasl.mechanisms"], wantSasl))
	}
	wantTLS := "disable"
	if proto == "SSL" || proto == "SASL_SSL" {
		wantTLS = "enable"
	}
	if v, ok := params["tls"]; ok && v != wantTLS {
		errs = append(errs, fmt.Sprintf("KEDA tls %q, but the workers use security.protocol %s (KEDA: %q)", v, proto, wantTLS))
	}
	return errs
}

func hpaErrors(h *autoscalingv2.HorizontalPodAutoscaler, annos map[string]string, d *appsv1.Deployment, adapter *adapterRules) []string {
	var errs []string
	t := h.Spec.ScaleTargetRef
	if t.Name != d.Name || t.Kind != "Deployment" || t.APIVersion != "apps/v1" {
		errs = append(errs, "scaleTargetRef does not name the worker Deployment "+d.Name)
	}
	parts, err := partitionsAnnotation(annos)
	if err != nil {
		errs = append(errs, err.Error())
	} else if h.Spec.MaxReplicas > parts {
		errs = append(errs, fmt.Sprintf("maxReplicas %d > %d partitions: the replicas beyond them would sit idle", h.Spec.MaxReplicas, parts))
	}
	for i, m := range h.Spec.Metrics {
		switch m.Type {
		case autoscalingv2.PodsMetricSourceType:
			if adapter == nil || !adapter.Custom[m.Pods.Metric.Name] {
				errs = append(errs, fmt.Sprintf("metrics[%d]: Pods metric %q is not served by a custom rule of %s", i, m.Pods.Metric.Name, adapterValues))
			}
		case autoscalingv2.ExternalMetricSourceType:
			if adapter == nil || !adapter.External[m.External.Metric.Name] {
				errs = append(errs, fmt.Sprintf("metrics[%d]: External metric %q is not served by an external rule of %s", i, m.External.Metric.Name, adapterValues))
			}
		}
	}
	return errs
}

// networkPolicyErrors: some NetworkPolicy of the workers' namespace selects
// the worker pods for Ingress; every ingress rule of one that does names
// narrow peers (not every source, every namespace, every pod of the
// namespace or a huge address block) and only the metrics port (the port
// metrics-listen binds; without ports a rule admits every port); and some
// rule admits the metrics port, or Prometheus cannot scrape.
func networkPolicyErrors(s *objSet, d *appsv1.Deployment, c *corev1.Container, wc *workerConf, ref *confReference) []string {
	podLabels := d.Spec.Template.Labels
	metricsPort, havePort := metricsListenPort(wc, ref)
	var errs []string
	selecting, scrapable := 0, false
	for _, np := range s.netpols {
		if np.Namespace != d.Namespace || !selectorSelects(&np.Spec.PodSelector, podLabels) {
			continue
		}
		ingress := len(np.Spec.PolicyTypes) == 0 // defaults to Ingress
		for _, t := range np.Spec.PolicyTypes {
			ingress = ingress || t == networkingv1.PolicyTypeIngress
		}
		if !ingress {
			continue
		}
		selecting++
		for i, r := range np.Spec.Ingress {
			where := fmt.Sprintf("NetworkPolicy/%s ingress[%d]", np.Name, i)
			if len(r.From) == 0 {
				errs = append(errs, where+": no `from`: admits every source")
			}
			for j, peer := range r.From {
				if e := peerTooBroad(peer); e != "" {
					errs = append(errs, fmt.Sprintf("%s from[%d]: %s", where, j, e))
				}
			}
			if len(r.Ports) == 0 {
				errs = append(errs, where+": no `ports`: admits every port of the pod")
			}
			for _, p := range r.Ports {
				if p.Port == nil {
					errs = append(errs, where+": a port entry without a port admits every port")
					continue
				}
				if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
					errs = append(errs, fmt.Sprintf("%s: protocol %s: the metrics port is TCP", where, *p.Protocol))
					continue
				}
				n, err := resolvePort(c, *p.Port)
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s: port %s: %v", where, p.Port.String(), err))
					continue
				}
				if havePort && n != metricsPort {
					errs = append(errs, fmt.Sprintf("%s: port %d is not metrics-listen's %d: the worker serves nothing else", where, n, metricsPort))
					continue
				}
				if p.EndPort != nil && *p.EndPort > n {
					errs = append(errs, fmt.Sprintf("%s: ports %d-%d admit more than the metrics port", where, n, *p.EndPort))
					continue
				}
				scrapable = true
			}
		}
	}
	if selecting == 0 {
		errs = append(errs, "no NetworkPolicy in the workers' namespace selects the worker pods for Ingress: anything in the cluster reaches the metrics port (many clients starve the probes)")
	} else if !scrapable {
		errs = append(errs, "no NetworkPolicy rule admits the metrics port: Prometheus cannot scrape the workers")
	}
	return errs
}

// peerTooBroad judges a peer by what it matches: a namespace selector that
// matches a namespace nobody labelled matches every namespace (then any
// pod anywhere, or any pod given the right label by whoever can create
// pods there); a pod selector alone that matches an unlabelled pod admits
// the whole namespace; an address block wider than /16 (IPv6 /48) is
// more than a scraper's subnet (a /8 is the whole pod network of most
// clusters).
func peerTooBroad(peer networkingv1.NetworkPolicyPeer) string {
	if peer.IPBlock != nil {
		_, nw, err := net.ParseCIDR(peer.IPBlock.CIDR)
		if err != nil {
			return fmt.Sprintf("ipBlock %q: %v", peer.IPBlock.CIDR, err)
		}
		ones, bits := nw.Mask.Size()
		if (bits == 32 && ones < 16) || (bits == 128 && ones < 48) {
			return fmt.Sprintf("ipBlock %s is wider than /16 (IPv6 /48): on most clusters that is the pod network or more, not the scraper (except does not narrow it)", peer.IPBlock.CIDR)
		}
		return ""
	}
	unlabelled := map[string]string{"kubernetes.io/metadata.name": "codefleet-validator-unlabelled-namespace"}
	if peer.NamespaceSelector != nil {
		if selectorSelects(peer.NamespaceSelector, unlabelled) {
			return "the namespaceSelector matches every namespace: pods anywhere in the cluster are admitted"
		}
		return ""
	}
	if peer.PodSelector != nil && selectorSelects(peer.PodSelector, map[string]string{}) {
		return "the podSelector matches every pod of the namespace"
	}
	return ""
}

// selectorSelects: a LabelSelector (matchLabels and matchExpressions)
// matches the labels; the empty selector selects every pod.
func selectorSelects(sel *metav1.LabelSelector, labels map[string]string) bool {
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return ls.Matches(k8slabels.Set(labels))
}

// metricsListenPort: the port of metrics-listen, when it parses.
func metricsListenPort(wc *workerConf, ref *confReference) (int32, bool) {
	_, portStr, err := net.SplitHostPort(wc.get(ref, "metrics-listen"))
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(portStr)
	if err != nil || n <= 0 || n > 65535 {
		return 0, false
	}
	return int32(n), true
}
