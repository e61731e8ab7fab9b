package deploy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// root is where the tree is loaded in the in-memory file system.
const root = "/deploy"

// object is one rendered manifest, decoded strictly into its type.
type object struct {
	Kind, Name string
	YAML       []byte
	Value      any
}

// rendered is one kustomization's output.
type rendered struct {
	Dir     string // relative to deploy/, e.g. "overlays/production"
	Objects []object
}

// newFor returns a new value of the Go type of an apiVersion and kind, or
// nil for a kind the manifests are not meant to hold.
func newFor(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return new(corev1.Namespace)
	case "v1 ConfigMap":
		return new(corev1.ConfigMap)
	case "v1 Secret":
		return new(corev1.Secret)
	case "v1 Service":
		return new(corev1.Service)
	case "v1 ServiceAccount":
		return new(corev1.ServiceAccount)
	case "apps/v1 DaemonSet":
		return new(appsv1.DaemonSet)
	case "apps/v1 Deployment":
		return new(appsv1.Deployment)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return new(autoscalingv2.HorizontalPodAutoscaler)
	case "policy/v1 PodDisruptionBudget":
		return new(policyv1.PodDisruptionBudget)
	case "networking.k8s.io/v1 NetworkPolicy":
		return new(networkingv1.NetworkPolicy)
	case "networking.k8s.io/v1 Ingress":
		return new(networkingv1.Ingress)
	case "postgresql.cnpg.io/v1 Cluster":
		return new(cnpgCluster)
	}
	return nil
}

// loadTree copies deploy/ into an in-memory file system, with the example
// secrets of overlays/production standing in for the real ones an operator
// writes to its secrets/ (which is never committed).
func loadTree(t *testing.T) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasPrefix(p, "overlays/production/secrets/") {
			return nil // an operator's real values, if any: not ours to read
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dst := []string{filepath.Join(root, p)}
		if dir := "overlays/production/secrets.example/"; strings.HasPrefix(p, dir) {
			dst = append(dst, filepath.Join(root, "overlays/production/secrets", strings.TrimPrefix(p, dir)))
		}
		for _, d := range dst {
			if err := mem.MkdirAll(filepath.Dir(d)); err != nil {
				return err
			}
			if err := mem.WriteFile(d, data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("load deploy/: %v", err)
	}
	return mem
}

// kustomizations returns the directories under deploy/ that hold a
// kustomization.yaml, split into buildable ones and components.
func kustomizations(t *testing.T) (builds, components []string) {
	t.Helper()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var k struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if k.Kind == "Component" {
			components = append(components, filepath.Dir(p))
		} else {
			builds = append(builds, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(builds)
	sort.Strings(components)
	if len(builds) == 0 {
		t.Fatal("no kustomization.yaml under deploy/")
	}
	return builds, components
}

// renderAll builds every kustomization and decodes its objects strictly:
// an unknown kind or field, or a duplicated key, fails the test.
func renderAll(t *testing.T) []rendered {
	t.Helper()
	mem := loadTree(t)
	builds, _ := kustomizations(t)
	var out []rendered
	for _, dir := range builds {
		out = append(out, render(t, mem, dir))
	}
	return out
}

func render(t *testing.T, mem filesys.FileSystem, dir string) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(mem, filepath.Join(root, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := rendered{Dir: dir}
	for _, res := range m.Resources() {
		data, err := res.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s/%s: %v", dir, res.GetKind(), res.GetName(), err)
		}
		v := newFor(res.GetApiVersion(), res.GetKind())
		if v == nil {
			t.Errorf("%s: %s %s/%s: a kind the tests do not know (add it to newFor)", dir, res.GetApiVersion(), res.GetKind(), res.GetName())
			continue
		}
		if err := yaml.UnmarshalStrict(data, v); err != nil {
			t.Errorf("%s: %s/%s does not decode strictly: %v", dir, res.GetKind(), res.GetName(), err)
			continue
		}
		r.Objects = append(r.Objects, object{Kind: res.GetKind(), Name: res.GetName(), YAML: data, Value: v})
	}
	return r
}

// all returns the objects of type T.
func all[T any](r rendered) []*T {
	var out []*T
	for _, o := range r.Objects {
		if v, ok := o.Value.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestRenderStrict(t *testing.T) {
	builds, components := kustomizations(t)
	used := map[string]bool{}
	for _, dir := range builds {
		data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Components []string `json:"components"`
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatal(err)
		}
		for _, c := range k.Components {
			used[filepath.Clean(filepath.Join(dir, c))] = true
		}
	}
	for _, c := range components {
		if !used[c] {
			t.Errorf("component %s is used by no kustomization, so no test renders it", c)
		}
	}
	for _, r := range renderAll(t) {
		kinds := map[string]int{}
		for _, o := range r.Objects {
			kinds[o.Kind]++
		}
		t.Logf("%s: %d objects %v", r.Dir, len(r.Objects), kinds)
		for _, want := range []string{"Namespace", "ConfigMap", "DaemonSet", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "Ingress"} {
			if kinds[want] == 0 {
				t.Errorf("%s renders no %s", r.Dir, want)
			}
		}
	}
}

// TestRenderedForTheNote writes every kustomization's output to the test's
// artifact directory (kept with go test -artifacts) and logs the base's
// DaemonSet and Deployment, for the note.
func TestRenderedForTheNote(t *testing.T) {
	dir := t.ArtifactDir()
	for _, r := range renderAll(t) {
		var all []string
		for _, o := range r.Objects {
			all = append(all, string(o.YAML))
			if r.Dir == "base" && (o.Kind == "DaemonSet" || o.Kind == "Deployment") {
				t.Logf("rendered %s/%s:\n%s", o.Kind, o.Name, o.YAML)
			}
		}
		name := filepath.Join(dir, strings.ReplaceAll(r.Dir, "/", "-")+".yaml")
		if err := os.WriteFile(name, []byte(strings.Join(all, "---\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", name)
	}
}
