package testwheel

import (
	"archive/zip"
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestBuild(t *testing.T) {
	b, err := Build("agentbox-demo", "0.1", "VALUE = 42\n")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range zr.File {
		rc, _ := f.Open()
		body, _ := io.ReadAll(rc)
		rc.Close()
		got[f.Name] = string(body)
	}
	if got["agentbox_demo/__init__.py"] != "VALUE = 42\n" || !strings.Contains(got["agentbox_demo-0.1.dist-info/METADATA"], "Name: agentbox-demo\nVersion: 0.1") ||
		strings.Count(got["agentbox_demo-0.1.dist-info/RECORD"], "\n") != 4 {
		t.Errorf("wheel: %v", got)
	}
}
