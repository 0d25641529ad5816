package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

func init() {
	// KEDA's validators log through controller-runtime; keep them quiet.
	logf.SetLogger(logr.Discard())
}

// kedaTag is one `keda:"..."` tag of the Kafka scaler's metadata struct.
type kedaTag struct {
	Name     string
	GoType   string
	Order    []string // triggerMetadata, authParams, resolvedEnv
	Optional bool
	Default  string
	HasDef   bool
	Enum     []string
}

func (t kedaTag) in(order string) bool {
	for _, o := range t.Order {
		if o == order {
			return true
		}
	}
	return false
}

var kedaFieldRE = regexp.MustCompile("^\\s*[A-Z][A-Za-z0-9]*\\s+(\\S+)\\s+`keda:\"([^\"]*)\"`")

// loadKafkaScalerTags reads the metadata KEDA's Kafka scaler accepts from
// the KEDA module's own source (pkg/scalers/kafka_scaler.go), so the check
// follows the KEDA version in go.mod.
func loadKafkaScalerTags(kedaDir string) (map[string]kedaTag, error) {
	p := filepath.Join(kedaDir, "pkg", "scalers", "kafka_scaler.go")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	s := string(data)
	start := strings.Index(s, "type kafkaMetadata struct {")
	if start < 0 {
		return nil, fmt.Errorf("%s: no kafkaMetadata struct", p)
	}
	end := strings.Index(s[start:], "\n}")
	tags := map[string]kedaTag{}
	for _, line := range strings.Split(s[start:start+end], "\n") {
		m := kedaFieldRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		t := kedaTag{GoType: m[1]}
		for _, part := range strings.Split(m[2], ",") {
			k, v, _ := strings.Cut(part, "=")
			switch k {
			case "name":
				t.Name = v
			case "order":
				t.Order = strings.Split(v, ";")
			case "optional":
				t.Optional = true
			case "default":
				t.Default, t.HasDef = v, true
			case "enum":
				t.Enum = strings.Split(v, ";")
			}
		}
		if t.Name != "" {
			tags[t.Name] = t
		}
	}
	for _, want := range []string{"bootstrapServers", "consumerGroup", "topic", "lagThreshold", "offsetResetPolicy"} {
		if _, ok := tags[want]; !ok {
			return nil, fmt.Errorf("%s: metadata %q not found: has the scaler changed?", p, want)
		}
	}
	return tags, nil
}

// kedaValidate runs KEDA's own admission checks that need no cluster
// (replica bounds, fallback, triggers, names, scaling modifiers; the
// TriggerAuthentication's spec) and checks Kafka trigger metadata against
// the scaler's tags.
func kedaValidate(ob object, kafkaTags map[string]kedaTag) []string {
	var errs []string
	switch so := ob.Obj.(type) {
	case *kedav1alpha1.ScaledObject:
		if err := kedav1alpha1.CheckReplicaCountBoundsAreValid(so); err != nil {
			errs = append(errs, err.Error())
		}
		if err := kedav1alpha1.CheckFallbackValid(so); err != nil {
			errs = append(errs, err.Error())
		}
		if err := kedav1alpha1.ValidateTriggers(so.Spec.Triggers); err != nil {
			errs = append(errs, err.Error())
		}
		if so.Spec.Advanced != nil && so.Spec.Advanced.ScalingModifiers.Formula != "" {
			if _, err := kedav1alpha1.ValidateAndCompileScalingModifiers(so); err != nil {
				errs = append(errs, err.Error())
			}
		}
		// verifyName of the webhook: the name is a label value, and so is
		// the HPA's ("keda-hpa-" + name unless set).
		hpa := "keda-hpa-" + so.Name
		if so.Spec.Advanced != nil && so.Spec.Advanced.HorizontalPodAutoscalerConfig != nil && so.Spec.Advanced.HorizontalPodAutoscalerConfig.Name != "" {
			hpa = so.Spec.Advanced.HorizontalPodAutoscalerConfig.Name
		}
		if len(so.Name) > 63 || len(hpa) > 63 {
			errs = append(errs, "name (or the HPA name derived from it) longer than 63 characters")
		}
		for i, tr := range so.Spec.Triggers {
			if tr.Type != "kafka" {
				continue
			}
			if kafkaTags == nil {
				errs = append(errs, "kafka trigger: KEDA's scaler metadata could not be read")
				continue
			}
			errs = append(errs, kafkaMetadataErrors(fmt.Sprintf("triggers[%d]", i), tr.Metadata, kafkaTags)...)
		}
	case *kedav1alpha1.TriggerAuthentication:
		if _, err := so.ValidateCreate(nil); err != nil {
			errs = append(errs, err.Error())
		}
		for i, ref := range so.Spec.SecretTargetRef {
			if t, ok := kafkaTags[ref.Parameter]; kafkaTags != nil && (!ok || !t.in("authParams")) {
				errs = append(errs, fmt.Sprintf("secretTargetRef[%d]: parameter %q is not an auth parameter of the kafka scaler (%s)",
					i, ref.Parameter, strings.Join(tagNames(kafkaTags, "authParams"), ", ")))
			}
		}
	default:
		errs = append(errs, "not a KEDA object this validator knows")
	}
	return errs
}

func tagNames(tags map[string]kedaTag, order string) []string {
	var n []string
	for name, t := range tags {
		if t.in(order) {
			n = append(n, name)
		}
	}
	sort.Strings(n)
	return n
}

// kafkaMetadataErrors: every key known to the scaler as trigger metadata
// (KEDA ignores unknown keys silently, so a typo would go unnoticed), enum
// and number values, required keys present.
func kafkaMetadataErrors(where string, md map[string]string, tags map[string]kedaTag) []string {
	var errs []string
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := md[k]
		name := k
		fromEnv := strings.HasSuffix(k, "FromEnv")
		if fromEnv {
			name = strings.TrimSuffix(k, "FromEnv")
		}
		t, ok := tags[name]
		if !ok || !t.in("triggerMetadata") || (fromEnv && !t.in("resolvedEnv")) {
			errs = append(errs, fmt.Sprintf("%s.metadata.%s: not a metadata key of KEDA's kafka scaler (known: %s)",
				where, k, strings.Join(tagNames(tags, "triggerMetadata"), ", ")))
			continue
		}
		if fromEnv {
			continue
		}
		if len(t.Enum) > 0 {
			found := false
			for _, e := range t.Enum {
				if e == v {
					found = true
				}
			}
			if !found {
				errs = append(errs, fmt.Sprintf("%s.metadata.%s: %q is not one of %s", where, k, v, strings.Join(t.Enum, ", ")))
			}
		}
		switch t.GoType {
		case "int64", "int", "int32":
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				errs = append(errs, fmt.Sprintf("%s.metadata.%s: %q is not an integer", where, k, v))
			}
		case "bool":
			if _, err := strconv.ParseBool(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s.metadata.%s: %q is not a boolean", where, k, v))
			}
		}
	}
	for name, t := range tags {
		if t.Optional || t.HasDef || !t.in("triggerMetadata") {
			continue
		}
		if _, ok := md[name]; ok {
			continue
		}
		if _, ok := md[name+"FromEnv"]; ok && t.in("resolvedEnv") {
			continue
		}
		errs = append(errs, fmt.Sprintf("%s.metadata.%s: required by KEDA's kafka scaler", where, name))
	}
	sort.Strings(errs)
	return errs
}
