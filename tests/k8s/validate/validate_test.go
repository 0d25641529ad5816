package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var repoRoot = filepath.Join("..", "..", "..")

func opts(k8sDir string) Options {
	return Options{K8sDir: k8sDir, ConfDocs: filepath.Join(repoRoot, "docs", "CONFIGURATION-worker.md")}
}

// The shipped manifests pass every check.
func TestShippedManifests(t *testing.T) {
	rep := Validate(opts(filepath.Join(repoRoot, "deploy", "k8s")))
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("shipped manifests fail:\n%s", strings.Join(f, "\n"))
	}
	if len(rep.Checks) < 40 {
		t.Fatalf("only %d checks ran", len(rep.Checks))
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

type edit struct {
	file     string // relative to deploy/k8s
	old, new string // old must occur in the file; the first occurrence is replaced
}

// Each case breaks the shipped manifests in one way; the validator must
// fail with a message containing want.  Together they show that strict
// decoding, the API server's validation, KEDA's checks and the
// cross-references actually run.
func TestBrokenManifestsFail(t *testing.T) {
	cases := []struct {
		name  string
		edits []edit
		want  string
	}{
		{"NetworkPolicy with a misspelled field (strict decoding)",
			[]edit{{"networkpolicy.yaml", "  policyTypes:", "  policyType:"}},
			`unknown field "spec.policyType"`},
		{"NetworkPolicy with an invalid protocol (API server validation)",
			[]edit{{"networkpolicy.yaml", "protocol: TCP", "protocol: TPC"}},
			`spec.ingress[0].ports[0].protocol: Unsupported value: "TPC"`},
		{"NetworkPolicy that does not select the worker pods",
			[]edit{{"networkpolicy.yaml", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: codefleet-worker", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: codefleet-workers"}},
			"no NetworkPolicy in the workers' namespace selects the worker pods for Ingress"},
		{"NetworkPolicy admitting every source",
			[]edit{{"networkpolicy.yaml", "    - from:\n        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n          podSelector:\n            matchLabels:\n              app.kubernetes.io/name: prometheus\n      ports:", "    - ports:"}},
			"no `from`: admits every source"},
		{"NetworkPolicy admitting every namespace",
			[]edit{{"networkpolicy.yaml", "        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n          podSelector:\n            matchLabels:\n              app.kubernetes.io/name: prometheus\n", "        - namespaceSelector: {}\n"}},
			"the namespaceSelector matches every namespace"},
		{"NetworkPolicy admitting a label in any namespace",
			[]edit{{"networkpolicy.yaml", "        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n", "        - namespaceSelector:\n            matchExpressions:\n              - {key: kubernetes.io/metadata.name, operator: Exists}\n"}},
			"the namespaceSelector matches every namespace"},
		{"NetworkPolicy admitting every pod of the namespace",
			[]edit{{"networkpolicy.yaml", "        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n          podSelector:\n            matchLabels:\n              app.kubernetes.io/name: prometheus\n", "        - podSelector: {}\n"}},
			"the podSelector matches every pod of the namespace"},
		{"NetworkPolicy admitting every address despite an except",
			[]edit{{"networkpolicy.yaml", "        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n          podSelector:\n            matchLabels:\n              app.kubernetes.io/name: prometheus\n", "        - ipBlock:\n            cidr: 0.0.0.0/0\n            except: [10.1.2.3/32]\n"}},
			"ipBlock 0.0.0.0/0 is wider than /16"},
		{"NetworkPolicy admitting the pod network",
			[]edit{{"networkpolicy.yaml", "        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n          podSelector:\n            matchLabels:\n              app.kubernetes.io/name: prometheus\n", "        - ipBlock:\n            cidr: 10.0.0.0/8\n"}},
			"ipBlock 10.0.0.0/8 is wider than /16"},
		{"NetworkPolicy admitting another port",
			[]edit{{"networkpolicy.yaml", "port: metrics", "port: 8080"}},
			"no container port 8080"},
		{"NetworkPolicy without ports",
			[]edit{{"networkpolicy.yaml", "      ports:\n        - port: metrics\n          protocol: TCP\n", ""}},
			"no `ports`: admits every port of the pod"},
		{"NetworkPolicy not in the kustomization",
			[]edit{{"kustomization.yaml", "  - networkpolicy.yaml\n", ""}},
			"networkpolicy.yaml is in no kustomization's resources"},
		{"misspelled Deployment field (strict decoding)",
			[]edit{{"deployment.yaml", "terminationGracePeriodSeconds: 60", "terminationGracePeriodSecond: 60"}},
			`unknown field "spec.template.spec.terminationGracePeriodSecond"`},
		{"misspelled ScaledObject field (strict decoding, KEDA types)",
			[]edit{{"keda-scaledobject.yaml", "maxReplicaCount: 6", "maxReplicaCounts: 6"}},
			`unknown field "spec.maxReplicaCounts"`},
		{"duplicate field (strict decoding)",
			[]edit{{"pdb.yaml", "  maxUnavailable: 1\n", "  maxUnavailable: 1\n  maxUnavailable: 2\n"}},
			`"maxUnavailable" already set in map`},
		{"unknown kustomization field",
			[]edit{{"kustomization.yaml", "resources:", "resource:\n  - x.yaml\nresources:"}},
			`unknown field "resource"`},
		{"procMount Unmasked without hostUsers: false (API server validation)",
			[]edit{{"deployment.yaml", "            privileged: false\n", "            privileged: false\n            procMount: Unmasked\n"}},
			"`hostUsers` must be false to use `Unmasked`"},
		{"privileged with allowPrivilegeEscalation false (API server validation)",
			[]edit{{"deployment.yaml", "privileged: false", "privileged: true"}},
			"cannot set `allowPrivilegeEscalation` to false and `privileged` to true"},
		{"PDB with both minAvailable and maxUnavailable (API server validation)",
			[]edit{{"pdb.yaml", "  maxUnavailable: 1\n", "  maxUnavailable: 1\n  minAvailable: 1\n"}},
			"minAvailable and maxUnavailable cannot be both set"},
		{"invalid Service port name (API server validation)",
			[]edit{{"service.yaml", "    - name: metrics", "    - name: Metrics_Port"}},
			"spec.ports[0].name"},
		{"HPA with minReplicas above maxReplicas (API server validation)",
			[]edit{{"hpa/hpa.yaml", "minReplicas: 1", "minReplicas: 7"}},
			"must be greater than or equal to `minReplicas`"},
		{"ScaledObject min > max (KEDA)",
			[]edit{{"keda-scaledobject.yaml", "minReplicaCount: 1", "minReplicaCount: 9"}},
			"MinReplicaCount=9 must be less than MaxReplicaCount=6"},
		{"misspelled kafka trigger metadata (KEDA scaler tags)",
			[]edit{{"keda-scaledobject.yaml", "lagThreshold:", "lagTreshold:"}},
			"metadata.lagTreshold: not a metadata key of KEDA's kafka scaler"},
		{"kafka trigger enum (KEDA scaler tags)",
			[]edit{{"keda-scaledobject.yaml", "offsetResetPolicy: earliest", "offsetResetPolicy: oldest"}},
			`"oldest" is not one of latest, earliest`},
		{"TriggerAuthentication parameter unknown to the kafka scaler",
			[]edit{{"keda-scaledobject.yaml", "- parameter: password", "- parameter: passwd"}},
			`parameter "passwd" is not an auth parameter`},
		{"probe on a port the container does not have",
			[]edit{{"deployment.yaml", "              path: /readyz\n              port: metrics", "              path: /readyz\n              port: metric"}},
			"readinessProbe: port metric: no container port"},
		{"readiness probe on the liveness path",
			[]edit{{"deployment.yaml", "path: /readyz", "path: /healthz"}},
			"readinessProbe: path /healthz, the worker serves /readyz"},
		{"metrics-listen on loopback",
			[]edit{{"configmap.yaml", "metrics-listen = 0.0.0.0:9464", "metrics-listen = 127.0.0.1:9464"}},
			"a loopback address is unreachable"},
		{"termination grace shorter than the drain",
			[]edit{{"deployment.yaml", "terminationGracePeriodSeconds: 60", "terminationGracePeriodSeconds: 40"}},
			"terminationGracePeriodSeconds 40 s <= shutdown-grace 30.0 s"},
		{"unknown worker.conf key",
			[]edit{{"configmap.yaml", "liveness-stall = 60s", "liveness-stal = 60s"}},
			`unknown key "liveness-stal"`},
		{"bad worker.conf duration",
			[]edit{{"configmap.yaml", "shutdown-grace = 30s", "shutdown-grace = 30 seconds"}},
			`unknown duration unit "seconds"`},
		{"worker.conf inline comment",
			[]edit{{"configmap.yaml", "slots = 2", "slots = 2 # two"}},
			"comments go on lines of their own"},
		{"credential in the ConfigMap",
			[]edit{{"configmap.yaml", "    slots = 2\n", "    slots = 2\n    redis-password = hunter2\n"}},
			"a credential belongs in the Secret"},
		{"environment variable the worker refuses",
			[]edit{{"deployment.yaml", "name: CODEFLEET_WORKER_WORKER_ID", "name: CODEFLEET_WORKER_WORKERID"}},
			"env CODEFLEET_WORKER_WORKERID names no configuration key"},
		{"credential through the environment",
			[]edit{{"deployment.yaml", "            - name: CODEFLEET_WORKER_WORKER_ID\n", "            - name: CODEFLEET_WORKER_REDIS_PASSWORD\n              value: x\n            - name: CODEFLEET_WORKER_WORKER_ID\n"}},
			"credentials never go through the worker's environment"},
		{"a setting in the Secret's credentials file",
			[]edit{{"secret.yaml", "    redis-password = CHANGE-ME\n", "    redis-password = CHANGE-ME\n    slots = 64\n"}},
			"settings belong in the ConfigMap, only credentials in the Secret"},
		{"settings before the credentials",
			[]edit{{"deployment.yaml", "cat /etc/codefleet-secret/credentials.conf /etc/codefleet/worker.conf", "cat /etc/codefleet/worker.conf /etc/codefleet-secret/credentials.conf"}},
			"the credentials must come before the settings"},
		{"credentials file readable by others",
			[]edit{{"deployment.yaml", "defaultMode: 0400", "defaultMode: 0444"}},
			"defaultMode must be 0400"},
		{"config composed on a disk emptyDir",
			[]edit{{"deployment.yaml", "> /run/codefleet/worker.conf", "> /tmp/worker.conf"}, {"deployment.yaml", "- /run/codefleet/worker.conf", "- /tmp/worker.conf"}},
			"must be medium: Memory"},
		{"service links on",
			[]edit{{"deployment.yaml", "enableServiceLinks: false", "enableServiceLinks: true"}},
			"enableServiceLinks must be false"},
		{"Secret key that does not exist",
			[]edit{{"deployment.yaml", "- key: credentials.conf", "- key: credential.conf"}},
			`has no key "credential.conf"`},
		{"ConfigMap not among the manifests",
			[]edit{{"deployment.yaml", "name: codefleet-worker-config", "name: codefleet-config"}},
			`ConfigMap "codefleet-config" is not among the manifests`},
		{"work-root not on the Memory emptyDir",
			[]edit{{"configmap.yaml", "work-root = /var/lib/codefleet/work", "work-root = /var/lib/codefleet"}},
			"work-root /var/lib/codefleet is not on a volume"},
		{"memory limit below the executions",
			[]edit{{"deployment.yaml", "              memory: 3Gi\n            limits:\n              cpu: \"2\"\n              memory: 3Gi", "              memory: 1Gi\n            limits:\n              cpu: \"2\"\n              memory: 1Gi"}},
			"limits.memory 1Gi <"},
		{"capability the sandbox needs removed",
			[]edit{{"deployment.yaml", "                - CHOWN\n", ""}},
			"capabilities.add lacks CHOWN"},
		{"no fully visible proc for the sandboxes",
			[]edit{{"deployment.yaml", "              mount -t proc -o nosuid,nodev,noexec proc /run/codefleet/proc\n", ""}},
			"the sandbox's /proc mount needs a fully visible proc"},
		{"RuntimeDefault seccomp",
			[]edit{{"deployment.yaml", "            seccompProfile:\n              type: Unconfined", "            seccompProfile:\n              type: RuntimeDefault"}},
			"seccompProfile must be Unconfined"},
		{"no writable cgroup",
			[]edit{{"deployment.yaml", `exec /usr/local/bin/codefleet-entrypoint "$@"`, `exec /usr/local/bin/codefleet-worker "$@"`}},
			"nothing makes /sys/fs/cgroup writable"},
		{"KEDA consumer group differs from the workers'",
			[]edit{{"keda-scaledobject.yaml", "consumerGroup: codefleet", "consumerGroup: codefleet-x"}},
			`consumerGroup "codefleet-x", the workers' group "codefleet"`},
		{"KEDA brokers differ from the workers'",
			[]edit{{"keda-scaledobject.yaml", "bootstrapServers: kafka-bootstrap.kafka.svc:9092", "bootstrapServers: kafka.other:9092"}},
			"bootstrapServers [kafka.other:9092]"},
		{"KEDA sasl differs from the workers'",
			[]edit{{"secret.yaml", `keda-kafka-sasl: "none"`, `keda-kafka-sasl: "plaintext"`}},
			`KEDA sasl "plaintext"`},
		{"more replicas than partitions",
			[]edit{{"keda-scaledobject.yaml", "maxReplicaCount: 6", "maxReplicaCount: 12"}},
			"maxReplicaCount 12 > 6 partitions"},
		{"HPA metric prometheus-adapter does not serve",
			[]edit{{"hpa/hpa.yaml", "name: codefleet_slots_busy", "name: codefleet_slot_busy"}},
			`Pods metric "codefleet_slot_busy" is not served`},
		{"two autoscalers on the Deployment",
			[]edit{{"kustomization.yaml", "  - keda-scaledobject.yaml\n", "  - keda-scaledobject.yaml\n  - hpa/hpa.yaml\n"}},
			"they would fight"},
		{"manifest in no kustomization",
			[]edit{{"extra.yaml", "", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n"}},
			"extra.yaml is in no kustomization's resources"},
		{"Service selecting nothing",
			[]edit{{"service.yaml", "  selector:\n    app.kubernetes.io/name: codefleet-worker", "  selector:\n    app.kubernetes.io/name: codefleet-workers"}},
			"selector does not match the worker pods' labels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "k8s")
			copyTree(t, filepath.Join(repoRoot, "deploy", "k8s"), dir)
			for _, e := range tc.edits {
				p := filepath.Join(dir, e.file)
				data, err := os.ReadFile(p)
				if os.IsNotExist(err) && e.old == "" {
					data, err = nil, nil
				}
				if err != nil {
					t.Fatal(err)
				}
				s := string(data)
				if e.old != "" && !strings.Contains(s, e.old) {
					t.Fatalf("%s does not contain %q: the case no longer applies, update it", e.file, e.old)
				}
				if e.old != "" {
					s = strings.Replace(s, e.old, e.new, 1)
				} else if e.new != "" {
					s = e.new
				}
				if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rep := Validate(opts(dir))
			failed := rep.Failed()
			for _, f := range failed {
				if strings.Contains(f, tc.want) {
					return
				}
			}
			t.Fatalf("want a failure containing %q, got:\n%s", tc.want, strings.Join(failed, "\n"))
		})
	}
}

func TestEnvKeyMapping(t *testing.T) {
	ref, err := loadConfReference(filepath.Join(repoRoot, "docs", "CONFIGURATION-worker.md"))
	if err != nil {
		t.Fatal(err)
	}
	for env, want := range map[string]string{
		"CODEFLEET_WORKER_REDIS_PASSWORD":           "redis-password",
		"CODEFLEET_WORKER_WORKER_ID":                "worker-id",
		"CODEFLEET_WORKER_KAFKA_SASL_PASSWORD":      "kafka.sasl.password",
		"CODEFLEET_WORKER_KAFKA_SESSION_TIMEOUT_MS": "kafka.session.timeout.ms",
		"CODEFLEET_WORKER_OTLP_HEADERS":             "otlp-headers",
		"CODEFLEET_WORKER_PORT":                     "",
		"CODEFLEET_WORKER_METRICS_PORT_9464_TCP":    "",
	} {
		if got := envKey(ref, env); got != want {
			t.Errorf("envKey(%s) = %q, want %q", env, got, want)
		}
	}
}
