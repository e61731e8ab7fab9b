package sandbox

// Service is what hostd's API serves, by concern: the manager's lifecycle
// (create, delete, snapshots, forks, pause, limits), its exec sessions, its
// files and its templates. Each part is its own type; Service only puts them
// side by side so that one value satisfies the API's interface.
type Service struct {
	*Manager
	*Execs
	*Files
	*Templates
}

// Service returns m with its exec and files services.
func (m *Manager) Service() Service {
	return Service{Manager: m, Execs: &Execs{m: m}, Files: &Files{m: m}, Templates: &Templates{m: m}}
}
