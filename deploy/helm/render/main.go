// Command render renders a Helm chart's templates the way `helm template` does, for the
// tests: no `helm` binary can be installed where they run. It uses only Go's standard
// library (text/template is Helm's own template engine) and implements the Helm built-ins
// and sprig functions the latticekv chart uses; a template calling any other function
// fails to parse with "function ... not defined", so the gap shows up as an error.
//
// YAML is read by the caller: Chart.yaml and the values files are passed as JSON.
//
//	render --chart DIR --chart-json chart.json --values values.json [--values more.json]
//	       [--set a.b=JSON-or-string] [--release NAME] [--namespace NS]
//
// Output: every rendered template file (those not starting with "_"), as YAML documents
// separated by "---" lines, each headed by "# Source: <chart>/templates/<file>".
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	chartDir := flag.String("chart", "", "chart directory (its templates/ are rendered)")
	chartJSON := flag.String("chart-json", "", "Chart.yaml converted to JSON")
	release := flag.String("release", "latticekv", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	var valueFiles, sets multiFlag
	flag.Var(&valueFiles, "values", "values as JSON; repeatable, later files win")
	flag.Var(&sets, "set", "path.to.key=value (value parsed as JSON, else a string); repeatable")
	flag.Parse()
	out, err := run(*chartDir, *chartJSON, *release, *namespace, valueFiles, sets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
	os.Stdout.WriteString(out)
}

func readJSON(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]interface{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m == nil {
		m = map[string]interface{}{}
	}
	return m, nil
}

// merge deep-merges src into dst (maps merge, anything else replaces), as Helm merges
// values files.
func merge(dst, src map[string]interface{}) {
	for k, v := range src {
		sv, sok := v.(map[string]interface{})
		dv, dok := dst[k].(map[string]interface{})
		if sok && dok {
			merge(dv, sv)
		} else {
			dst[k] = v
		}
	}
}

func applySet(values map[string]interface{}, set string) error {
	key, raw, ok := strings.Cut(set, "=")
	if !ok || key == "" {
		return fmt.Errorf("--set %q: want path.to.key=value", set)
	}
	var v interface{}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		v = raw
	}
	parts := strings.Split(key, ".")
	node := values
	for _, p := range parts[:len(parts)-1] {
		next, ok := node[p].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			node[p] = next
		}
		node = next
	}
	node[parts[len(parts)-1]] = v
	return nil
}

// chartObject maps Chart.yaml's keys to Helm's .Chart fields (name -> Name, ...).
func chartObject(meta map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range meta {
		if k == "apiVersion" {
			out["APIVersion"] = v
			continue
		}
		out[strings.ToUpper(k[:1])+k[1:]] = v
	}
	return out
}

func run(chartDir, chartJSON, release, namespace string, valueFiles, sets []string) (string, error) {
	if chartDir == "" || chartJSON == "" {
		return "", errors.New("--chart and --chart-json are required")
	}
	meta, err := readJSON(chartJSON)
	if err != nil {
		return "", err
	}
	values := map[string]interface{}{}
	for _, f := range valueFiles {
		v, err := readJSON(f)
		if err != nil {
			return "", err
		}
		merge(values, v)
	}
	for _, s := range sets {
		if err := applySet(values, s); err != nil {
			return "", err
		}
	}
	top := map[string]interface{}{
		"Values": values,
		"Chart":  chartObject(meta),
		"Release": map[string]interface{}{
			"Name": release, "Namespace": namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Capabilities": map[string]interface{}{},
	}

	files, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	root := template.New("chart").Option("missingkey=zero")
	root.Funcs(funcMap(root))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		if _, err := root.New(filepath.Base(f)).Parse(string(data)); err != nil {
			return "", err
		}
	}
	chartName, _ := meta["name"].(string)
	var out strings.Builder
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasPrefix(name, "_") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, top); err != nil {
			return "", err
		}
		// Helm prints missing values as nothing rather than "<no value>".
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s/templates/%s\n%s\n", chartName, name, strings.Trim(text, "\n"))
	}
	return out.String(), nil
}

// funcMap holds the Helm built-ins and sprig functions the chart uses.
func funcMap(root *template.Template) template.FuncMap {
	return template.FuncMap{
		"include": func(name string, data interface{}) (string, error) {
			var buf bytes.Buffer
			err := root.ExecuteTemplate(&buf, name, data)
			return buf.String(), err
		},
		"required": func(msg string, v interface{}) (interface{}, error) {
			if v == nil {
				return nil, errors.New(msg)
			}
			if s, ok := v.(string); ok && s == "" {
				return nil, errors.New(msg)
			}
			return v, nil
		},
		"default": func(d interface{}, given ...interface{}) interface{} {
			if len(given) == 0 || empty(given[0]) {
				return d
			}
			return given[0]
		},
		"empty":    empty,
		"toString": strval,
		"quote": func(args ...interface{}) string {
			out := []string{}
			for _, a := range args {
				if a != nil {
					out = append(out, strconv.Quote(strval(a)))
				}
			}
			return strings.Join(out, " ")
		},
		"squote": func(args ...interface{}) string {
			out := []string{}
			for _, a := range args {
				if a != nil {
					out = append(out, "'"+strval(a)+"'")
				}
			}
			return strings.Join(out, " ")
		},
		"indent":  indent,
		"nindent": func(n int, s string) string { return "\n" + indent(n, s) },
		"toYaml": func(v interface{}) string {
			var b strings.Builder
			writeYAML(&b, v, 0)
			return strings.TrimSuffix(b.String(), "\n")
		},
		"toJson": func(v interface{}) (string, error) {
			data, err := json.Marshal(v)
			return string(data), err
		},
		"list":       func(v ...interface{}) []interface{} { return v },
		"trim":       strings.TrimSpace,
		"trunc":      trunc,
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"lower":      strings.ToLower,
		"upper":      strings.ToUpper,
	}
}

func strval(v interface{}) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case error:
		return v.Error()
	case fmt.Stringer:
		return v.String()
	default:
		return fmt.Sprintf("%v", v)
	}
}

func empty(v interface{}) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return r.Len() == 0
	case reflect.Bool:
		return !r.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return r.Int() == 0
	case reflect.Float32, reflect.Float64:
		return r.Float() == 0
	case reflect.Ptr, reflect.Interface:
		return r.IsNil()
	}
	return false
}

func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

func trunc(n int, s string) string {
	if n >= 0 && len(s) > n {
		return s[:n]
	}
	if n < 0 && len(s) > -n {
		return s[len(s)+n:]
	}
	return s
}

// writeYAML emits block-style YAML with sorted keys, as Helm's toYaml does; strings are
// plain when YAML reads them back as strings, else double-quoted (JSON quoting is valid YAML).
func writeYAML(b *strings.Builder, v interface{}, level int) {
	pad := strings.Repeat("  ", level)
	switch v := v.(type) {
	case map[string]interface{}:
		if len(v) == 0 {
			b.WriteString(pad + "{}\n")
			return
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			key := scalar(k)
			if nested(v[k]) {
				fmt.Fprintf(b, "%s%s:\n", pad, key)
				writeYAML(b, v[k], level+1)
			} else {
				fmt.Fprintf(b, "%s%s: %s\n", pad, key, scalar(v[k]))
			}
		}
	case []interface{}:
		if len(v) == 0 {
			b.WriteString(pad + "[]\n")
			return
		}
		for _, item := range v {
			if nested(item) {
				var inner strings.Builder
				writeYAML(&inner, item, level+1)
				// The first line of the item goes after the dash.
				b.WriteString(pad + "- " + strings.TrimPrefix(inner.String(), pad+"  "))
			} else {
				fmt.Fprintf(b, "%s- %s\n", pad, scalar(item))
			}
		}
	default:
		b.WriteString(pad + scalar(v) + "\n")
	}
}

func nested(v interface{}) bool {
	switch v := v.(type) {
	case map[string]interface{}:
		return len(v) > 0
	case []interface{}:
		return len(v) > 0
	}
	return false
}

// plain matches strings YAML reads back as the same string without quotes (unless reserved).
var plain = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]*$`)

var reserved = map[string]bool{
	"true": true, "false": true, "null": true, "yes": true, "no": true,
	"on": true, "off": true, "y": true, "n": true, "~": true,
}

func scalar(v interface{}) string {
	switch v := v.(type) {
	case map[string]interface{}:
		return "{}"
	case []interface{}:
		return "[]"
	case nil:
		return "null"
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		if plain.MatchString(v) && !reserved[strings.ToLower(v)] {
			return v
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		return strconv.Quote(strval(v))
	}
	return string(data)
}
