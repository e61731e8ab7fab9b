package client

import (
	"os"
	"strings"
	"testing"
)

func TestTemplateNamePatternIsTheSpecs(t *testing.T) {
	spec, err := os.ReadFile("../hostd/api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := "pattern: '" + templateName.String() + "'"
	if !strings.Contains(string(spec), want) && !strings.Contains(string(spec), `pattern: "`+templateName.String()+`"`) {
		t.Errorf("the spec has no %s: client.IsTemplateName is out of step with TemplateName", want)
	}
	for name, ok := range map[string]bool{"python-data": true, "img-abc.1_x": true, "127.0.0.1:5000/busybox:1": false,
		"/var/cache/x": false, "../x": false, ".": false, "": false} {
		if IsTemplateName(name) != ok {
			t.Errorf("IsTemplateName(%q) = %v, want %v", name, !ok, ok)
		}
	}
}
