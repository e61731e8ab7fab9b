package deploy

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// pods are the pod templates of a render, and the pods a CloudNativePG
// Cluster makes (labelled cnpg.io/cluster=NAME).
type pod struct {
	owner  string
	labels map[string]string
	spec   *corev1.PodSpec // nil for a Cluster's pods
}

func pods(r rendered) []pod {
	var out []pod
	for _, d := range all[appsv1.DaemonSet](r) {
		out = append(out, pod{"DaemonSet/" + d.Name, d.Spec.Template.Labels, &d.Spec.Template.Spec})
	}
	for _, d := range all[appsv1.Deployment](r) {
		out = append(out, pod{"Deployment/" + d.Name, d.Spec.Template.Labels, &d.Spec.Template.Spec})
	}
	for _, c := range all[cnpgCluster](r) {
		out = append(out, pod{"Cluster/" + c.Name, map[string]string{"cnpg.io/cluster": c.Name}, nil})
	}
	return out
}

// selected returns the pods a label selector matches.
func selected(t *testing.T, ps []pod, sel *metav1.LabelSelector) []pod {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	var out []pod
	for _, p := range ps {
		if !s.Empty() && s.Matches(labels.Set(p.labels)) {
			out = append(out, p)
		}
	}
	return out
}

// hasPort reports whether a port (by name or number) is a container port
// of the pod.
func hasPort(p pod, port intstr.IntOrString) bool {
	if p.spec == nil {
		return port.IntValue() == 5432 // a CloudNativePG instance
	}
	for _, c := range p.spec.Containers {
		for _, cp := range c.Ports {
			if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
				return true
			}
		}
	}
	return false
}

func one[T any](t *testing.T, r rendered, name string) *T {
	t.Helper()
	for _, o := range r.Objects {
		// A generated ConfigMap or Secret has a hash after its name.
		generated := (o.Kind == "ConfigMap" || o.Kind == "Secret") && strings.HasPrefix(o.Name, name+"-")
		if v, ok := o.Value.(*T); ok && (o.Name == name || generated) {
			return v
		}
	}
	t.Fatalf("%s: no %T named %s", r.Dir, new(T), name)
	return nil
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func TestStructure(t *testing.T) {
	for _, r := range renderAll(t) {
		t.Run(strings.ReplaceAll(r.Dir, "/", "_"), func(t *testing.T) {
			checkHostd(t, r)
			checkGateway(t, r)
			checkServices(t, r)
			checkNetworkPolicies(t, r)
			checkIngress(t, r)
			checkRefs(t, r)
		})
	}
}

func checkHostd(t *testing.T, r rendered) {
	ds := one[appsv1.DaemonSet](t, r, "agentbox-hostd")
	spec := ds.Spec.Template.Spec
	if spec.NodeSelector["agentbox.dev/kvm"] != "true" {
		t.Errorf("hostd's nodeSelector %v lacks agentbox.dev/kvm=true", spec.NodeSelector)
	}
	if spec.HostNetwork {
		t.Error("hostd is on the host network: NetworkPolicy would not guard its API")
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 600 {
		t.Errorf("terminationGracePeriodSeconds %v: a drain needs minutes", g)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	c := spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Error("hostd is not privileged")
	}
	mounted := map[string]corev1.Volume{}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Errorf("hostd mounts %s, which is no volume", m.Name)
		}
		mounted[m.MountPath] = v
	}
	for _, dev := range []string{"/dev/kvm", "/dev/net/tun"} {
		v := mounted[dev]
		if v.HostPath == nil || v.HostPath.Path != dev || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathCharDev {
			t.Errorf("%s is not mounted from the node as a CharDevice: %+v", dev, v)
		}
	}
	if v := mounted["/var/lib/agentbox"]; v.HostPath == nil || v.HostPath.Path != "/var/lib/agentbox" {
		t.Errorf("hostd's data is not on the node's /var/lib/agentbox: %+v", v)
	}
	if e := env(c, "AGENTBOX_DATA_DIR"); e == nil || e.Value != "/var/lib/agentbox" {
		t.Errorf("AGENTBOX_DATA_DIR %+v, want /var/lib/agentbox", e)
	}
	for name, field := range map[string]string{"NODE_NAME": "spec.nodeName", "POD_IP": "status.podIP"} {
		if e := env(c, name); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("%s is not the downward API's %s: %+v", name, field, e)
		}
	}
	for name, want := range map[string]string{"AGENTBOX_FLEET_HOST": "$(NODE_NAME)", "AGENTBOX_FLEET_ADVERTISE": "http://$(POD_IP):7070"} {
		if e := env(c, name); e == nil || e.Value != want {
			t.Errorf("%s = %+v, want %q", name, e, want)
		}
	}
	// A caller's key must not reach a host: hostd reads AGENTBOX_API_KEY as a key it accepts.
	if e := env(c, "AGENTBOX_API_KEY"); e != nil {
		t.Errorf("hostd's env holds AGENTBOX_API_KEY (%+v): hostd would accept the operator's key", e)
	}
	if e := env(c, "AGENTBOX_URL"); e == nil || !strings.Contains(e.Value, "agentbox-gateway") {
		t.Errorf("AGENTBOX_URL %+v does not name the gateway Service", e)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Fatal("hostd has no exec preStop")
	}
	script := strings.Join(c.Lifecycle.PreStop.Exec.Command, " ")
	for _, want := range []string{`agentbox host drain "$NODE_NAME"`, "AGENTBOX_API_KEY=", "/etc/agentbox/operator/api-key"} {
		if !strings.Contains(script, want) {
			t.Errorf("preStop %q lacks %q", script, want)
		}
	}
	if _, ok := mounted["/etc/agentbox/operator"]; !ok {
		t.Error("the operator key's Secret is not mounted where the preStop reads it")
	}
	checkProbes(t, "hostd", c)
}

func checkProbes(t *testing.T, who string, c corev1.Container) {
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if p == nil {
			if name != "startup" {
				t.Errorf("%s has no %s probe", who, name)
			}
			continue
		}
		if p.HTTPGet == nil {
			t.Errorf("%s's %s probe is not an HTTP GET", who, name)
			continue
		}
		if !hasPort(pod{spec: &corev1.PodSpec{Containers: []corev1.Container{c}}}, p.HTTPGet.Port) {
			t.Errorf("%s's %s probe port %s is no container port", who, name, p.HTTPGet.Port.String())
		}
	}
}

func checkGateway(t *testing.T, r rendered) {
	d := one[appsv1.Deployment](t, r, "agentbox-gateway")
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/usr/local/bin/agentbox", "gateway"}) {
		t.Errorf("gateway command %v", c.Command)
	}
	checkProbes(t, "gateway", c)
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("gateway liveness path %s, want /healthz", c.LivenessProbe.HTTPGet.Path)
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("gateway readiness path %s, want /readyz", c.ReadinessProbe.HTTPGet.Path)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("gateway requests no cpu or memory: %v", c.Resources.Requests)
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if r.Dir != "overlays/kind" && replicas < 2 {
		t.Errorf("gateway replicas %d, want at least 2", replicas)
	}
	hpa := one[autoscalingv2.HorizontalPodAutoscaler](t, r, "agentbox-gateway")
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("the HPA targets %+v, not the gateway Deployment", ref)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas > replicas || hpa.Spec.MaxReplicas < *hpa.Spec.MinReplicas {
		t.Errorf("HPA min %v max %d against replicas %d", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas, replicas)
	}
	pdb := one[policyv1.PodDisruptionBudget](t, r, "agentbox-gateway")
	ps := selected(t, pods(r), pdb.Spec.Selector)
	if len(ps) != 1 || ps[0].owner != "Deployment/agentbox-gateway" {
		t.Errorf("the PDB selects %v, not the gateway", ps)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() >= int(replicas) {
		t.Errorf("PDB minAvailable %v of %d replicas would block every node drain", pdb.Spec.MinAvailable, replicas)
	}
}

func checkServices(t *testing.T, r rendered) {
	for _, s := range all[corev1.Service](r) {
		ps := selected(t, pods(r), &metav1.LabelSelector{MatchLabels: s.Spec.Selector})
		if len(ps) == 0 {
			t.Errorf("Service %s selects no pod template (%v)", s.Name, s.Spec.Selector)
		}
		for _, sp := range s.Spec.Ports {
			for _, p := range ps {
				if !hasPort(p, sp.TargetPort) {
					t.Errorf("Service %s port %s: targetPort %s is no port of %s", s.Name, sp.Name, sp.TargetPort.String(), p.owner)
				}
			}
		}
	}
}

func checkNetworkPolicies(t *testing.T, r rendered) {
	ps := pods(r)
	for _, np := range all[networkingv1.NetworkPolicy](r) {
		targets := selected(t, ps, &np.Spec.PodSelector)
		if len(targets) == 0 {
			t.Errorf("NetworkPolicy %s selects no pods", np.Name)
		}
		peers := func(dir string, list []networkingv1.NetworkPolicyPeer) {
			for _, p := range list {
				if p.PodSelector != nil && p.NamespaceSelector == nil && len(selected(t, ps, p.PodSelector)) == 0 {
					t.Errorf("NetworkPolicy %s: %s peer %v selects no pods", np.Name, dir, p.PodSelector)
				}
			}
		}
		for _, in := range np.Spec.Ingress {
			peers("from", in.From)
			for _, port := range in.Ports {
				for _, tg := range targets {
					if port.Port != nil && !hasPort(tg, *port.Port) {
						t.Errorf("NetworkPolicy %s admits port %s, which %s does not serve", np.Name, port.Port.String(), tg.owner)
					}
				}
			}
		}
		for _, out := range np.Spec.Egress {
			peers("to", out.To)
			for _, p := range out.To {
				if p.PodSelector == nil {
					continue
				}
				for _, tg := range selected(t, ps, p.PodSelector) {
					for _, port := range out.Ports {
						if port.Port != nil && !hasPort(tg, *port.Port) {
							t.Errorf("NetworkPolicy %s lets out to port %s, which %s does not serve", np.Name, port.Port.String(), tg.owner)
						}
					}
				}
			}
		}
	}
	hostd := one[networkingv1.NetworkPolicy](t, r, "agentbox-hostd")
	for _, in := range hostd.Spec.Ingress {
		for _, p := range in.From {
			got := selected(t, ps, p.PodSelector)
			if p.PodSelector == nil || p.NamespaceSelector != nil || p.IPBlock != nil || len(got) != 1 || got[0].owner != "Deployment/agentbox-gateway" {
				t.Errorf("hostd's API admits %+v, not only the gateway's pods", p)
			}
		}
		if len(in.From) == 0 {
			t.Error("hostd's API admits everyone")
		}
	}
	var pg bool
	for _, out := range hostd.Spec.Egress {
		for _, port := range out.Ports {
			pg = pg || (port.Port != nil && port.Port.IntValue() == 5432)
		}
	}
	if !pg {
		t.Error("hostd may not reach PostgreSQL")
	}
}

func checkIngress(t *testing.T, r rendered) {
	cm := one[corev1.ConfigMap](t, r, "agentbox-config")
	domain := cm.Data["AGENTBOX_DOMAIN"]
	ing := one[networkingv1.Ingress](t, r, "agentbox")
	var hosts []string
	for _, rule := range ing.Spec.Rules {
		hosts = append(hosts, rule.Host)
		if rule.HTTP == nil {
			t.Errorf("Ingress rule %s has no paths", rule.Host)
			continue
		}
		for _, p := range rule.HTTP.Paths {
			b := p.Backend.Service
			if b == nil {
				t.Errorf("Ingress %s%s has no Service backend", rule.Host, p.Path)
				continue
			}
			svc := one[corev1.Service](t, r, b.Name)
			if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
				return (b.Port.Name != "" && sp.Name == b.Port.Name) || (b.Port.Number != 0 && sp.Port == b.Port.Number)
			}) {
				t.Errorf("Ingress %s%s: Service %s has no port %+v", rule.Host, p.Path, b.Name, b.Port)
			}
		}
	}
	want := []string{"api." + domain, "*." + domain}
	if !slices.Equal(hosts, want) {
		t.Errorf("Ingress hosts %v, want %v (from AGENTBOX_DOMAIN)", hosts, want)
	}
	for _, tls := range ing.Spec.TLS {
		if !slices.Equal(tls.Hosts, want) {
			t.Errorf("Ingress TLS hosts %v, want %v", tls.Hosts, want)
		}
	}
}

// checkRefs checks that every Secret and ConfigMap key a pod reads is in
// the render, except the app Secret a CloudNativePG Cluster makes.
func checkRefs(t *testing.T, r rendered) {
	keys := map[string]map[string]bool{}
	for _, s := range all[corev1.Secret](r) {
		keys["Secret/"+s.Name] = map[string]bool{}
		for k := range s.Data {
			keys["Secret/"+s.Name][k] = true
		}
	}
	for _, c := range all[cnpgCluster](r) {
		keys["Secret/"+c.Name+"-app"] = map[string]bool{"uri": true, "username": true, "password": true, "host": true}
	}
	for _, c := range all[corev1.ConfigMap](r) {
		keys["ConfigMap/"+c.Name] = map[string]bool{}
		for k := range c.Data {
			keys["ConfigMap/"+c.Name][k] = true
		}
	}
	base := r.Dir == "base" // the base leaves the Secrets to its overlays
	ref := func(where, kind, name, key string) {
		if base && kind == "Secret" {
			return
		}
		if !keys[kind+"/"+name][key] {
			t.Errorf("%s reads %s %s key %s, which the render does not hold", where, kind, name, key)
		}
	}
	for _, p := range pods(r) {
		if p.spec == nil {
			continue
		}
		for _, c := range p.spec.Containers {
			for _, e := range c.Env {
				where := fmt.Sprintf("%s %s env %s", p.owner, c.Name, e.Name)
				if f := e.ValueFrom; f != nil && f.SecretKeyRef != nil {
					ref(where, "Secret", f.SecretKeyRef.Name, f.SecretKeyRef.Key)
				} else if f != nil && f.ConfigMapKeyRef != nil {
					ref(where, "ConfigMap", f.ConfigMapKeyRef.Name, f.ConfigMapKeyRef.Key)
				}
			}
		}
		for _, v := range p.spec.Volumes {
			if v.Secret != nil {
				for _, it := range v.Secret.Items {
					ref(p.owner+" volume "+v.Name, "Secret", v.Secret.SecretName, it.Key)
				}
			}
		}
	}
	if r.Dir == "overlays/production-cnpg" {
		for _, p := range pods(r) {
			if p.spec == nil {
				continue
			}
			if e := env(p.spec.Containers[0], "AGENTBOX_FLEET_DB"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "agentbox-pg-app" {
				t.Errorf("%s's AGENTBOX_FLEET_DB is not the CloudNativePG app Secret: %+v", p.owner, e)
			}
		}
	}
}

// TestImageHasTheCommands checks that every program the manifests run from
// the agentbox image is one deploy/Dockerfile installs where they run it.
func TestImageHasTheCommands(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	installed := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == "COPY" && strings.HasPrefix(f[1], "--from=") && f[len(f)-1] == "/usr/local/bin/" {
			for _, src := range f[2 : len(f)-1] {
				installed["/usr/local/bin/"+path.Base(src)] = true
			}
		}
	}
	for _, r := range renderAll(t) {
		for _, p := range pods(r) {
			if p.spec == nil {
				continue
			}
			for _, c := range p.spec.Containers {
				if !ours(c.Image) {
					continue
				}
				progs := []string{}
				if len(c.Command) > 0 {
					progs = append(progs, c.Command[0])
				}
				if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Exec != nil {
					for _, cl := range scriptLines("", c.Lifecycle.PreStop.Exec.Command) {
						progs = append(progs, cl.argv[0])
					}
				}
				for _, prog := range progs {
					if !installed[prog] {
						t.Errorf("%s: %s %s runs %s, which deploy/Dockerfile does not install (it installs %v)", r.Dir, p.owner, c.Name, prog, installed)
					}
				}
			}
		}
	}
}
