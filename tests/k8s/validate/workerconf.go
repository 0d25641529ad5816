package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// confKey is one row of docs/CONFIGURATION-worker.md.
type confKey struct {
	Name, Type, Default, Range string
}

type confReference struct {
	Keys    map[string]confKey // top-level keys ("kafka." and "profile." are key/value lists)
	Profile map[string]confKey // keys of a [profile.NAME] section
}

// Keys of issue 14 (the operations contract) that the reference may not
// list yet; accepted explicitly.  The reference wins when it has them.
var opsKeys = []confKey{
	{Name: "metrics-listen", Type: "string", Default: ""},
	{Name: "liveness-stall", Type: "duration", Default: "60s"},
	{Name: "otlp-endpoint", Type: "string", Default: ""},
	{Name: "otlp-headers", Type: "string", Default: ""},
}

var rowRE = regexp.MustCompile("^\\|\\s*`([a-z0-9.*-]+)`\\s*\\|([^|]*)\\|([^|]*)\\|([^|]*)\\|")

// loadConfReference reads the two key tables of the generated reference.
func loadConfReference(path string) (*confReference, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ref := &confReference{Keys: map[string]confKey{}, Profile: map[string]confKey{}}
	inProfiles := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inProfiles = strings.TrimSpace(line[3:]) == "Profiles"
			continue
		}
		// "\|" is a pipe inside a cell (enum values: text\|json).
		m := rowRE.FindStringSubmatch(strings.ReplaceAll(line, `\|`, "\x00"))
		if m == nil {
			continue
		}
		cell := func(i int) string { return strings.ReplaceAll(strings.TrimSpace(m[i]), "\x00", "|") }
		k := confKey{Name: m[1], Type: cell(2), Default: cell(3), Range: cell(4)}
		if inProfiles {
			ref.Profile[k.Name] = k
		} else {
			ref.Keys[strings.TrimSuffix(k.Name, "*")] = k
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ref.Keys) < 20 || len(ref.Profile) < 5 {
		return nil, fmt.Errorf("%s: found %d keys and %d profile keys: not the reference's tables", path, len(ref.Keys), len(ref.Profile))
	}
	for _, k := range []string{"kafka.", "profile.", "shutdown-grace", "shutdown-kafka-timeout", "slots", "work-root"} {
		if _, ok := ref.Keys[k]; !ok {
			return nil, fmt.Errorf("%s: key %q missing from the reference", path, k)
		}
	}
	for _, k := range opsKeys {
		if _, ok := ref.Keys[k.Name]; !ok {
			ref.Keys[k.Name] = k
		}
	}
	return ref, nil
}

// workerConf is a parsed worker.conf: top-level keys, and profile
// sections flattened as profile.NAME.KEY.
type workerConf struct {
	Values map[string]string
	Lines  map[string]int
}

// parseWorkerConf checks a worker.conf against the reference: known keys,
// values of the right type and range, no duplicates, no inline comments.
func parseWorkerConf(text string, ref *confReference) (*workerConf, []string) {
	wc := &workerConf{Values: map[string]string{}, Lines: map[string]int{}}
	var errs []string
	section := ""
	for i, raw := range strings.Split(text, "\n") {
		n := i + 1
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			if !strings.HasSuffix(line, "]") {
				errs = append(errs, fmt.Sprintf("line %d: unterminated section %q", n, line))
				continue
			}
			section = strings.TrimSpace(line[1 : len(line)-1])
			if !strings.HasPrefix(section, "profile.") || len(section) <= len("profile.") {
				errs = append(errs, fmt.Sprintf("line %d: section [%s]: only [profile.NAME] sections exist", n, section))
			}
			continue
		}
		eq := strings.IndexByte(line, '=')
		if eq < 0 {
			errs = append(errs, fmt.Sprintf("line %d: expected 'key = value': %q", n, line))
			continue
		}
		key := strings.TrimSpace(line[:eq])
		val := strings.TrimSpace(line[eq+1:])
		if strings.Contains(val, " #") || strings.Contains(val, " ;") {
			errs = append(errs, fmt.Sprintf("line %d: %s: value %q holds a comment: comments go on lines of their own", n, key, val))
		}
		full := key
		var k confKey
		var ok bool
		switch {
		case section != "":
			full = section + "." + key
			k, ok = ref.Profile[key]
		case strings.HasPrefix(key, "kafka.") && len(key) > len("kafka."):
			k, ok = confKey{Name: key, Type: "string"}, true
		case strings.HasPrefix(key, "profile."):
			parts := strings.SplitN(key, ".", 3)
			if len(parts) == 3 {
				k, ok = ref.Profile[parts[2]]
			}
		default:
			k, ok = ref.Keys[key]
			if ok && strings.HasSuffix(k.Name, "*") {
				ok = false
			}
		}
		if !ok {
			where := "docs/CONFIGURATION-worker.md"
			if section != "" {
				where += " (Profiles)"
			}
			errs = append(errs, fmt.Sprintf("line %d: unknown key %q (not in %s)", n, full, where))
			continue
		}
		if prev, dup := wc.Lines[full]; dup {
			errs = append(errs, fmt.Sprintf("line %d: %s set again (first on line %d)", n, full, prev))
		}
		if err := checkValue(k, val); err != nil {
			errs = append(errs, fmt.Sprintf("line %d: %s = %q: %v", n, full, val, err))
		}
		wc.Values[full] = val
		wc.Lines[full] = n
	}
	return wc, errs
}

// get returns a key's value from the file, else the reference's default.
func (wc *workerConf) get(ref *confReference, key string) string {
	if v, ok := wc.Values[key]; ok {
		return v
	}
	d := ref.Keys[key].Default
	if d == "(unset)" {
		return ""
	}
	return d
}

var rangeRE = regexp.MustCompile(`^(-?[0-9]+(?:\.[0-9]+)?[a-zA-Z]*) \.\. (-?[0-9]+(?:\.[0-9]+)?[a-zA-Z]*)$`)

func checkValue(k confKey, v string) error {
	switch k.Type {
	case "string":
		if m := regexp.MustCompile(`^max ([0-9]+) bytes$`).FindStringSubmatch(k.Range); m != nil {
			max, _ := strconv.Atoi(m[1])
			if len(v) > max {
				return fmt.Errorf("longer than %d bytes", max)
			}
		}
		return nil
	case "bool":
		switch strings.ToLower(v) {
		case "1", "true", "yes", "on", "0", "false", "no", "off":
			return nil
		}
		return fmt.Errorf("not a boolean")
	case "enum":
		for _, e := range strings.Split(k.Range, "|") {
			if strings.TrimSpace(e) == v {
				return nil
			}
		}
		return fmt.Errorf("not one of %s", k.Range)
	case "int":
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		if m := rangeRE.FindStringSubmatch(k.Range); m != nil {
			lo, _ := strconv.ParseInt(m[1], 10, 64)
			hi, _ := strconv.ParseInt(m[2], 10, 64)
			if x < lo || x > hi {
				return fmt.Errorf("outside %s", k.Range)
			}
		}
		return nil
	case "duration", "size":
		parse := parseDurationUS
		if k.Type == "size" {
			parse = parseSize
		}
		x, err := parse(v)
		if err != nil {
			return err
		}
		if m := rangeRE.FindStringSubmatch(k.Range); m != nil {
			lo, err1 := parse(m[1])
			hi, err2 := parse(m[2])
			if err1 == nil && err2 == nil && (x < lo || x > hi) {
				return fmt.Errorf("outside %s", k.Range)
			}
		}
		return nil
	}
	return nil
}

var numUnitRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)$`)

// parseDurationUS follows cf_parse_duration_us (common/cf_util.c).
func parseDurationUS(s string) (int64, error) {
	m := numUnitRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("not a duration (a number with us, ms, s, m or h)")
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	var mul float64
	switch m[2] {
	case "", "s":
		mul = 1e6
	case "ms":
		mul = 1e3
	case "us":
		mul = 1
	case "m", "min":
		mul = 60e6
	case "h":
		mul = 3600e6
	default:
		return 0, fmt.Errorf("unknown duration unit %q (use us, ms, s, m, h)", m[2])
	}
	return int64(math.Round(v * mul)), nil
}

// parseSize follows cf_parse_size (common/cf_util.c).
func parseSize(s string) (int64, error) {
	m := numUnitRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("not a size (a number with B, KiB, MiB or GiB)")
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	var mul float64
	switch strings.ToLower(m[2]) {
	case "", "b":
		mul = 1
	case "k", "kb", "kib":
		mul = 1 << 10
	case "m", "mb", "mib":
		mul = 1 << 20
	case "g", "gb", "gib":
		mul = 1 << 30
	default:
		return 0, fmt.Errorf("unknown size unit %q (use B, KiB, MiB, GiB)", m[2])
	}
	return int64(v * mul), nil
}

// envStem mirrors env_stem in common/cf_config.c: "kafka." -> "KAFKA_".
func envStem(name string) string {
	var b strings.Builder
	for _, c := range name {
		if c == '.' || c == '-' {
			b.WriteByte('_')
		} else {
			b.WriteString(strings.ToUpper(string(c)))
		}
	}
	return b.String()
}

const envPrefix = "CODEFLEET_WORKER_"

// envKey maps a CODEFLEET_WORKER_* variable to the key it sets, as
// cf_conf_load_env does; "" when the worker would refuse it.
func envKey(ref *confReference, name string) string {
	rest := strings.TrimPrefix(name, envPrefix)
	if rest == "CONFIG" {
		return "(config file)"
	}
	for k := range ref.Keys {
		if !strings.HasSuffix(k, ".") && envStem(k) == rest {
			return k
		}
	}
	best := ""
	for k := range ref.Keys {
		if strings.HasSuffix(k, ".") {
			stem := envStem(k)
			if len(stem) < len(rest) && strings.HasPrefix(rest, stem) && len(k) > len(best) {
				best = k
			}
		}
	}
	if best == "" {
		return ""
	}
	sub := strings.ToLower(strings.ReplaceAll(rest[len(envStem(best)):], "_", "."))
	return best + sub
}
