package portproxy

import (
	"maps"
	"slices"
	"sync"
)

// publicPorts is the set of ports whose service URLs need no credential,
// kept in a small JSON file ({"sb-…":[8000]}) so it survives a restart.
type publicPorts struct {
	path string

	mu    sync.Mutex
	ports map[string][]int
}

func loadPublic(path string) (*publicPorts, error) {
	p := &publicPorts{path: path, ports: map[string][]int{}}
	if err := readJSONFile(path, "public ports", &p.ports); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *publicPorts) is(id string, port int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.ports[id], port)
}

// set makes sandbox id's port public or private.
func (p *publicPorts) set(id string, port int, public bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ports := slices.DeleteFunc(slices.Clone(p.ports[id]), func(q int) bool { return q == port })
	if public {
		ports = append(ports, port)
		slices.Sort(ports)
	}
	next := maps.Clone(p.ports)
	if len(ports) == 0 {
		delete(next, id)
	} else {
		next[id] = ports
	}
	if err := p.write(next); err != nil {
		return err
	}
	p.ports = next
	return nil
}

// forget drops every public port of sandbox id.
func (p *publicPorts) forget(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.ports[id]; !ok {
		return nil
	}
	next := maps.Clone(p.ports)
	delete(next, id)
	if err := p.write(next); err != nil {
		return err
	}
	p.ports = next
	return nil
}

// write replaces the file atomically. Call with mu held.
func (p *publicPorts) write(m map[string][]int) error {
	return writeJSONFile(p.path, ".public-ports-*", m)
}
