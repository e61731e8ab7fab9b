package egress

import "testing"

func TestMatchDomain(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		want          bool
	}{
		{"api.github.com", "api.github.com", true},
		{"api.github.com", "API.GitHub.com.", true},
		{"api.github.com", "github.com", false},
		{"*.github.com", "api.github.com", true},
		{"*.github.com", "a.b.github.com", true},
		{"*.github.com", "github.com", false},
		{"*.github.com", "evilgithub.com", false},
		{"*", "anything.example", true},
		{"*", "", false},
	} {
		t.Run(tc.pattern+"/"+tc.host, func(t *testing.T) {
			if got := matchDomain(tc.pattern, tc.host); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	bad := []Policy{
		{Mode: "open"},
		{Mode: ModeProxy, AllowDomains: []string{"*.*.com"}},
		{Mode: ModeProxy, AllowCIDRs: []string{"10.0.0.0/33"}},
		{Mode: ModeProxy, AllowPorts: []int{0}},
		{Mode: ModeProxy, Inject: []InjectRule{{Host: "a.com", Header: "X: y", Value: "v"}}},
		{Mode: ModeProxy, Inject: []InjectRule{{Host: "a.com", Header: "X", Value: "v\r\nEvil: 1"}}},
	}
	for i, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("%d: %+v: no error", i, p)
		}
	}
	good := Policy{Mode: ModeProxy, AllowDomains: []string{"*.github.com", "example.com"}, AllowCIDRs: []string{"10.250.0.0/16"},
		AllowPorts: []int{443}, Inject: []InjectRule{{Host: "api.github.com", Header: "Authorization", Value: "Bearer {{secret:gh}}"}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := good.Inject[0].Secrets(); len(got) != 1 || got[0] != "gh" {
		t.Errorf("Secrets() = %v, want [gh]", got)
	}
}
