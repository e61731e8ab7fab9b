package sandbox

import "github.com/agentbox/agentbox/hostd/cgroup"

// fakeCgroups is a Cgroups that creates nothing (for limit validation).
type fakeCgroups struct{}

func (fakeCgroups) Create(string, cgroup.Limits) (*cgroup.Group, error) { return nil, nil }
func (fakeCgroups) Remove(string) error                                 { return nil }
func (fakeCgroups) List() ([]string, error)                             { return nil, nil }
