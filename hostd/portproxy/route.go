package portproxy

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

// target is a service URL's sandbox and guest port, and the guest path of
// the request.
type target struct {
	sandbox string
	port    int
	// pathBased is set for /v1/sandboxes/{id}/ports/{port}/… URLs; prefix is
	// then the escaped part that is stripped before forwarding.
	pathBased bool
	prefix    string
	// stripAuthorization drops the request's Authorization header, which
	// carried hostd's credential.
	stripAuthorization bool
}

// addr is the key under which the upstream transport pools connections to
// the target; DialContext parses it back.
func (t target) addr() string { return t.sandbox + ":" + strconv.Itoa(t.port) }

// parseAddr reverses addr.
func parseAddr(addr string) (string, int, bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(p)
	return host, port, err == nil && validPort(port)
}

func validPort(p int) bool { return p >= 1 && p <= 65535 }

// matchHost matches a host-based service URL, {port}-{sandbox}.{domain}.
func matchHost(host, domain string) (target, bool) {
	if domain == "" {
		return target{}, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, ok := strings.CutSuffix(host, "."+domain)
	if !ok || strings.Contains(label, ".") {
		return target{}, false
	}
	p, id, ok := strings.Cut(label, "-")
	if !ok || id == "" {
		return target{}, false
	}
	port, err := strconv.Atoi(p)
	if err != nil || !validPort(port) || strconv.Itoa(port) != p {
		return target{}, false
	}
	return target{sandbox: id, port: port}, true
}

// pathRoot is where path-based service URLs live.
const pathRoot = "/v1/sandboxes/"

// matchPath matches a path-based service URL,
// /v1/sandboxes/{id}/ports/{port}/…, given the request's escaped path. The
// exact path …/ports/{port} (no slash) belongs to the API, as does
// POST …/ports/{port}/links.
func matchPath(method, escaped string) (target, bool) {
	rest, ok := strings.CutPrefix(escaped, pathRoot)
	if !ok {
		return target{}, false
	}
	parts := strings.SplitN(rest, "/", 4) // id, "ports", port, guest path
	if len(parts) < 4 || parts[0] == "" || parts[1] != "ports" {
		return target{}, false
	}
	port, err := strconv.Atoi(parts[2])
	if err != nil || !validPort(port) || strconv.Itoa(port) != parts[2] {
		return target{}, false
	}
	if method == "POST" && parts[3] == "links" {
		return target{}, false
	}
	id, err := url.PathUnescape(parts[0])
	if err != nil {
		return target{}, false
	}
	prefix := pathRoot + parts[0] + "/ports/" + parts[2]
	return target{sandbox: id, port: port, pathBased: true, prefix: prefix}, true
}

// hostURL is the host-based service URL of sandbox id's port, on the
// scheme and port of origin (hostd as the caller reached it).
func hostURL(origin *url.URL, domain, id string, port int) string {
	if domain == "" {
		return ""
	}
	host := strconv.Itoa(port) + "-" + id + "." + domain
	if p := origin.Port(); p != "" {
		host = net.JoinHostPort(host, p)
	}
	return (&url.URL{Scheme: origin.Scheme, Host: host, Path: "/"}).String()
}

// pathURL is the path-based service URL of sandbox id's port.
func pathURL(origin *url.URL, id string, port int) string {
	return (&url.URL{Scheme: origin.Scheme, Host: origin.Host, Path: pathRoot + id + "/ports/" + strconv.Itoa(port) + "/"}).String()
}
