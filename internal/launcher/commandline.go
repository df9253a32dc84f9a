package launcher

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
)

// loopback is the address every process binds and every in-cluster address maps to.
const loopback = "127.0.0.1"

// serviceAccountMount is where a pod's ServiceAccount token, CA and namespace are mounted.
const serviceAccountMount = "/var/run/secrets/kubernetes.io/serviceaccount"

// program is what the launcher knows of a binary it runs in place of a container image: which local file it is, and
// how the things a pod gets from Kubernetes (a hostname, its own network namespace, an in-cluster configuration,
// Service addresses) are said on its command line. Each flag is added only when the rendered arguments lack it.
type program struct {
	binary func(Binaries) string
	// idFlag names the replica, as the pod's hostname does in a cluster (the programs default to the hostname).
	idFlag string
	// bindFlag binds the listeners to loopback, standing in for the pod's own network namespace.
	bindFlag string
	// kubeconfigFlag stands in for the in-cluster configuration; "" when the program takes none.
	kubeconfigFlag string
	// resolveFlag maps in-cluster host:port to loopback, as Services and hostAliases would; "" when none.
	resolveFlag string
	// sharedPorts are listening ports every pod of the program wants on the one loopback address (each managed
	// cluster's agent has the same health port); a taken one is moved to a free port.
	sharedPorts []portFlag
}

type portFlag struct {
	flag     string
	fallback int32 // the program's default when the flag is not rendered
}

// programs maps a container's command to the program that stands in for the image.
var programs = map[string]program{
	"/proxy-server": {
		binary:   func(b Binaries) string { return b.ProxyServer },
		idFlag:   "--server-id",
		bindFlag: "--bind-address",
	},
	"/proxy-agent": {
		binary:         func(b Binaries) string { return b.ProxyAgent },
		idFlag:         "--agent-id",
		bindFlag:       "--health-bind-address",
		kubeconfigFlag: "--kubeconfig",
		resolveFlag:    "--resolve",
		sharedPorts:    []portFlag{{flag: "--health-server-port", fallback: render.AgentHealthPort}},
	},
}

// podContext is what Kubernetes would give one pod, in local terms.
type podContext struct {
	Name, Namespace string
	// Dir holds the pod's volumes: a mount path P is the folder Dir+P.
	Dir string
	// APIServer is the loopback host:port of the cluster's kube-apiserver (KUBERNETES_SERVICE_HOST/PORT).
	APIServer string
	// Kubeconfig stands in for the in-cluster configuration; "" when the pod mounts no ServiceAccount token.
	Kubeconfig string
	// Addresses maps in-cluster host:port to loopback host:port.
	Addresses map[string]string
	Binaries  Binaries
	// Secret reads a Secret of the pod's namespace, for env valueFrom.
	Secret func(name string) (*corev1.Secret, bool)
	// Port returns the loopback port for a listening port the pod renders (the same one when it is free).
	Port func(rendered int32) (int32, error)
}

// commandLine is a process that stands in for a pod's container.
type commandLine struct {
	Path string
	Args []string // without argv[0]
	Env  []string
	// Ports maps each rendered listening port the launcher moved to the loopback port used instead.
	Ports map[int32]int32
}

// unsupportedError is a pod template the launcher cannot run faithfully; nothing is started until it changes.
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return "unsupported pod template: " + e.msg }

func unsupported(format string, a ...any) error { return &unsupportedError{fmt.Sprintf(format, a...)} }

// buildCommandLine turns a pod template into the process that stands in for its container: the rendered command and
// arguments with $(VAR) references expanded as the kubelet does and mount paths pointing into pc.Dir, the rendered
// environment plus what a pod gets (KUBERNETES_SERVICE_HOST/PORT, HOSTNAME), and the program's flags for what
// Kubernetes provides (see program).
func buildCommandLine(tmpl *corev1.PodTemplateSpec, pc podContext) (*commandLine, error) {
	spec := &tmpl.Spec
	if len(spec.InitContainers) > 0 {
		return nil, unsupported("%d init containers", len(spec.InitContainers))
	}
	if len(spec.Containers) != 1 {
		return nil, unsupported("%d containers, want 1", len(spec.Containers))
	}
	c := &spec.Containers[0]
	if len(c.Command) == 0 {
		return nil, unsupported("container %s has no command, and the image's entrypoint is not known here", c.Name)
	}
	if len(c.EnvFrom) > 0 {
		return nil, unsupported("container %s uses envFrom", c.Name)
	}

	env, err := containerEnv(c, tmpl, pc)
	if err != nil {
		return nil, err
	}
	values := map[string]string{}
	for _, e := range env {
		values[e.name] = e.value
	}
	argv := make([]string, 0, len(c.Command)+len(c.Args))
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		argv = append(argv, expand(a, mappingFor(values)))
	}
	prog, ok := programs[argv[0]]
	if !ok {
		return nil, unsupported("container %s runs %s, which has no local binary", c.Name, argv[0])
	}
	path := prog.binary(pc.Binaries)
	if path == "" {
		return nil, fmt.Errorf("no local binary for %s (Binaries)", argv[0])
	}

	mounts, err := mountPaths(spec, c, pc)
	if err != nil {
		return nil, err
	}
	args := make([]string, 0, len(argv)+8)
	for _, a := range argv[1:] {
		args = append(args, mapArg(a, mounts))
	}
	envList := make([]string, 0, len(env))
	for _, e := range env {
		envList = append(envList, e.name+"="+mapValue(e.value, mounts))
	}

	cl := &commandLine{Path: path, Env: envList, Ports: map[int32]int32{}}
	for _, p := range prog.sharedPorts {
		rendered, present, err := portArg(args, p)
		if err != nil {
			return nil, err
		}
		local, err := pc.Port(rendered)
		if err != nil {
			return nil, err
		}
		if local == rendered {
			continue
		}
		cl.Ports[rendered] = local
		if present {
			args = setFlag(args, p.flag, strconv.Itoa(int(local)))
		} else {
			args = append(args, p.flag+"="+strconv.Itoa(int(local)))
		}
	}
	add := func(flag, value string) {
		if flag != "" && !hasFlag(args, flag) {
			args = append(args, flag+"="+value)
		}
	}
	add(prog.bindFlag, loopback)
	add(prog.idFlag, pc.Name)
	if pc.Kubeconfig != "" {
		add(prog.kubeconfigFlag, pc.Kubeconfig)
	}
	if prog.resolveFlag != "" {
		rendered := map[string]bool{}
		for _, v := range flagValues(args, prog.resolveFlag) {
			from, _, _ := strings.Cut(v, "=")
			rendered[strings.ToLower(from)] = true
		}
		for _, from := range slices.Sorted(maps.Keys(pc.Addresses)) {
			if !rendered[strings.ToLower(from)] {
				args = append(args, prog.resolveFlag+"="+from+"="+pc.Addresses[from])
			}
		}
	}
	cl.Args = args
	return cl, nil
}

// mount is a mount path and the folder that stands in for it.
type mount struct{ path, local string }

// mountPaths are the container's mounts, longest path first so nested mounts win. Only volumes the launcher can
// materialise are accepted.
func mountPaths(spec *corev1.PodSpec, c *corev1.Container, pc podContext) ([]mount, error) {
	volumes := map[string]*corev1.Volume{}
	for i := range spec.Volumes {
		volumes[spec.Volumes[i].Name] = &spec.Volumes[i]
	}
	var out []mount
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			return nil, unsupported("volume mount %s names no volume", m.Name)
		}
		if v.Secret == nil && v.ConfigMap == nil && v.EmptyDir == nil {
			return nil, unsupported("volume %s is not a secret, configMap or emptyDir volume", v.Name)
		}
		if m.SubPath != "" || m.SubPathExpr != "" {
			return nil, unsupported("volume mount %s uses a subPath", m.Name)
		}
		out = append(out, mount{path: cleanMountPath(m.MountPath), local: localPath(pc.Dir, m.MountPath)})
	}
	if pc.Kubeconfig != "" {
		out = append(out, mount{path: serviceAccountMount, local: localPath(pc.Dir, serviceAccountMount)})
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].path) > len(out[j].path) })
	return out, nil
}

func cleanMountPath(p string) string {
	if len(p) > 1 {
		return strings.TrimRight(p, "/")
	}
	return p
}

// localPath is where a pod path lives under dir.
func localPath(dir, podPath string) string {
	return dir + cleanMountPath("/"+strings.TrimLeft(podPath, "/"))
}

// mapArg points an argument at the local files when it is a path under a mount, alone or as --flag=path.
func mapArg(a string, mounts []mount) string {
	if strings.HasPrefix(a, "-") {
		if flag, value, ok := strings.Cut(a, "="); ok {
			return flag + "=" + mapValue(value, mounts)
		}
		return a
	}
	return mapValue(a, mounts)
}

func mapValue(v string, mounts []mount) string {
	for _, m := range mounts {
		if v == m.path || strings.HasPrefix(v, m.path+"/") {
			return m.local + v[len(m.path):]
		}
	}
	return v
}

// flagName is the name of a --flag or --flag=value argument, "" for other arguments. Go's flag package accepts one
// dash or two.
func flagName(a string) string {
	if !strings.HasPrefix(a, "-") {
		return ""
	}
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	return name
}

func hasFlag(args []string, flag string) bool {
	name := strings.TrimLeft(flag, "-")
	for _, a := range args {
		if flagName(a) == name {
			return true
		}
	}
	return false
}

// flagValues are the values of every --flag=value argument.
func flagValues(args []string, flag string) []string {
	name := strings.TrimLeft(flag, "-")
	var out []string
	for _, a := range args {
		if flagName(a) == name {
			if _, v, ok := strings.Cut(a, "="); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// setFlag replaces the value of every --flag=value argument.
func setFlag(args []string, flag, value string) []string {
	name := strings.TrimLeft(flag, "-")
	out := slices.Clone(args)
	for i, a := range out {
		if flagName(a) == name && strings.Contains(a, "=") {
			dashes := a[:len(a)-len(strings.TrimLeft(a, "-"))]
			out[i] = dashes + name + "=" + value
		}
	}
	return out
}

// portArg is the port the program will listen on for p: the last rendered value (as the flag package keeps), else
// the program's default.
func portArg(args []string, p portFlag) (port int32, present bool, err error) {
	values := flagValues(args, p.flag)
	if len(values) == 0 {
		if hasFlag(args, p.flag) {
			return 0, false, unsupported("%s without =value", p.flag)
		}
		return p.fallback, false, nil
	}
	n, err := strconv.ParseInt(values[len(values)-1], 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return 0, false, fmt.Errorf("%s=%s is not a port", p.flag, values[len(values)-1])
	}
	return int32(n), true, nil
}

// envVar is one variable of a process environment.
type envVar struct{ name, value string }

// containerEnv is the container's environment as the kubelet builds it: each rendered variable in order, $(VAR)
// references expanded against the variables before it and the service variables, valueFrom resolved; then the
// service variables a pod always gets (the kubernetes Service, here the loopback apiserver) and HOSTNAME.
func containerEnv(c *corev1.Container, tmpl *corev1.PodTemplateSpec, pc podContext) ([]envVar, error) {
	host, port, err := net.SplitHostPort(pc.APIServer)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver address %q: %w", pc.APIServer, err)
	}
	service := []envVar{{"KUBERNETES_SERVICE_HOST", host}, {"KUBERNETES_SERVICE_PORT", port}}
	serviceMap := map[string]string{}
	for _, s := range service {
		serviceMap[s.name] = s.value
	}

	defined := map[string]string{}
	var out []envVar
	index := map[string]int{}
	set := func(name, value string) {
		defined[name] = value
		if i, ok := index[name]; ok {
			out[i].value = value
			return
		}
		index[name] = len(out)
		out = append(out, envVar{name, value})
	}
	mapping := mappingFor(defined, serviceMap)
	for _, e := range c.Env {
		value := e.Value
		switch {
		case value != "":
			value = expand(value, mapping)
		case e.ValueFrom != nil:
			v, ok, err := valueFrom(e, tmpl, pc)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue // an optional reference to something missing: the kubelet leaves the variable out
			}
			value = v
		}
		set(e.Name, value)
	}
	for _, s := range service {
		if _, ok := defined[s.name]; !ok {
			set(s.name, s.value)
		}
	}
	if _, ok := defined["HOSTNAME"]; !ok {
		set("HOSTNAME", pc.Name) // the container runtime sets it to the pod's hostname
	}
	return out, nil
}

func valueFrom(e corev1.EnvVar, tmpl *corev1.PodTemplateSpec, pc podContext) (string, bool, error) {
	src := e.ValueFrom
	switch {
	case src.FieldRef != nil:
		v, err := fieldValue(src.FieldRef.FieldPath, tmpl, pc)
		return v, err == nil, err
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s, ok := pc.Secret(ref.Name)
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, &missingError{fmt.Sprintf("secret %s/%s (env %s) not found", pc.Namespace, ref.Name, e.Name)}
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, &missingError{fmt.Sprintf("secret %s/%s has no key %s (env %s)", pc.Namespace, ref.Name, ref.Key, e.Name)}
		}
		return string(v), true, nil
	default:
		return "", false, unsupported("env %s: only fieldRef and secretKeyRef are supported in valueFrom", e.Name)
	}
}

func fieldValue(path string, tmpl *corev1.PodTemplateSpec, pc podContext) (string, error) {
	switch path {
	case "metadata.name":
		return pc.Name, nil
	case "metadata.namespace":
		return pc.Namespace, nil
	case "spec.serviceAccountName":
		if sa := tmpl.Spec.ServiceAccountName; sa != "" {
			return sa, nil
		}
		return "default", nil
	case "status.podIP", "status.podIPs", "status.hostIP", "status.hostIPs":
		return loopback, nil // every pod here is on loopback
	}
	if key, ok := bracketKey(path, "metadata.labels"); ok {
		return tmpl.Labels[key], nil
	}
	if key, ok := bracketKey(path, "metadata.annotations"); ok {
		return tmpl.Annotations[key], nil
	}
	return "", unsupported("fieldRef %s", path)
}

// bracketKey parses prefix['key'].
func bracketKey(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// missingError is something the pod needs that is not there yet (a Secret, a key); the kubelet waits for it.
type missingError struct{ msg string }

func (e *missingError) Error() string { return e.msg }

// mappingFor looks a variable up in each context in order; an unknown one stays "$(NAME)", as in the kubelet.
func mappingFor(contexts ...map[string]string) func(string) string {
	return func(name string) string {
		for _, c := range contexts {
			if v, ok := c[name]; ok {
				return v
			}
		}
		return "$(" + name + ")"
	}
}

// expand replaces $(VAR) references with mapping's values and $$ with $, as the kubelet does for env values, command
// and args (k8s.io/kubernetes/third_party/forked/golang/expansion).
func expand(input string, mapping func(string) string) string {
	var buf strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(input); cursor++ {
		if input[cursor] != '$' || cursor+1 >= len(input) {
			continue
		}
		buf.WriteString(input[checkpoint:cursor])
		read, isVar, advance := readVariableName(input[cursor+1:])
		if isVar {
			buf.WriteString(mapping(read))
		} else {
			buf.WriteString(read)
		}
		cursor += advance
		checkpoint = cursor + 1
	}
	return buf.String() + input[checkpoint:]
}

// readVariableName reads what follows a '$': a "(NAME)" reference, an escaped '$', or anything else kept as is.
func readVariableName(input string) (string, bool, int) {
	switch input[0] {
	case '$':
		return "$", false, 1
	case '(':
		for i := 1; i < len(input); i++ {
			if input[i] == ')' {
				return input[1:i], true, i + 1
			}
		}
		return "$(", false, 1 // not closed: kept literally
	default:
		return "$" + input[:1], false, 1
	}
}
