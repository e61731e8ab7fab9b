package commands

import "testing"

func TestParseInjects(t *testing.T) {
	got, err := parseInjects([]string{"api.github.com:Authorization=Bearer {{secret:gh}}", "*.x.test:X-Key=a=b"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Host != "api.github.com" || got[0].Header != "Authorization" || got[0].Value != "Bearer {{secret:gh}}" {
		t.Errorf("got %+v", got[0])
	}
	if got[1].Host != "*.x.test" || got[1].Header != "X-Key" || got[1].Value != "a=b" {
		t.Errorf("got %+v", got[1])
	}
	for _, bad := range []string{"nohost", ":H=v", "h:=v", "h:H"} {
		if _, err := parseInjects([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := parsePorts([]string{"x"}); err == nil {
		t.Error("bad port accepted")
	}
}
