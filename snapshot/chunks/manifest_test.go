package chunks_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/snapshot/chunks"
)

const validManifest = `{"version":1,"id":"sb-1","kind":"paused","parent":"snap-0",
"requires":{"kernel":"sha256:00ff","base":"abc"},
"files":[{"name":"memory","size":8388608,"mode":384,"chunks":[
{"off":0,"len":4194304},
{"off":4194304,"len":4194304,"digest":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","stored":1200}]},
{"name":"disk.qcow2","size":10,"mode":420,"chunks":[]}],
"meta":{"sandbox":{"id":"sb-1"}},"created":"2026-12-07T20:00:00Z"}`

func TestParseManifest(t *testing.T) {
	m, err := chunks.ParseManifest([]byte(validManifest))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Digests()) != 1 || m.Files[0].Chunks[1].Stored != 1200 {
		t.Fatalf("%+v", m)
	}
	bad := map[string]string{
		"unknown field":  strings.Replace(validManifest, `"kind"`, `"kinds":"x","kind"`, 1),
		"version":        strings.Replace(validManifest, `"version":1`, `"version":2`, 1),
		"kind":           strings.Replace(validManifest, `"paused"`, `"other"`, 1),
		"path name":      strings.Replace(validManifest, `"memory"`, `"../memory"`, 1),
		"hidden name":    strings.Replace(validManifest, `"memory"`, `".fetch-1"`, 1),
		"overlap":        strings.Replace(validManifest, `"off":4194304`, `"off":4194303`, 1),
		"past the size":  strings.Replace(validManifest, `"size":8388608`, `"size":8388607`, 1),
		"digest":         strings.Replace(validManifest, `"9f86`, `"9F86`, 1),
		"trailing data":  validManifest + `{}`,
		"mode":           strings.Replace(validManifest, `"mode":384`, `"mode":2048`, 1),
		"parent is self": strings.Replace(validManifest, `"snap-0"`, `"sb-1"`, 1),
	}
	for what, b := range bad {
		if _, err := chunks.ParseManifest([]byte(b)); err == nil {
			t.Errorf("%s: parsed", what)
		}
	}
}

// FuzzParseManifest: whatever parses passes Validate, survives a
// marshal and parse unchanged, and its chunks lie within their files.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(validManifest))
	f.Add([]byte(`{"version":1,"id":"a","kind":"snapshot","files":[],"created":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"version":1,"id":"a","kind":"template","files":[{"name":"f","size":1,"mode":0,"chunks":[{"off":0,"len":1,"digest":""}]}],"created":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"version":1,"id":"a","kind":"checkpoint","files":null,"meta":null,"created":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := chunks.ParseManifest(b)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed but does not validate: %v", err)
		}
		for _, file := range m.Files {
			for _, c := range file.Chunks {
				if c.Off < 0 || c.Len <= 0 || c.Off+c.Len > file.Size {
					t.Fatalf("chunk %+v outside %s of %d", c, file.Name, file.Size)
				}
			}
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := chunks.ParseManifest(out)
		if err != nil {
			t.Fatalf("re-parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(normal(m), normal(m2)) {
			t.Fatalf("round trip differs:\n%+v\n%+v", m, m2)
		}
	})
}

// normal drops what a JSON round trip may change without meaning:
// whitespace in Meta, nil against empty, the clock's monotonic reading.
func normal(m chunks.Manifest) chunks.Manifest {
	if len(m.Meta) > 0 {
		var v any
		_ = json.Unmarshal(m.Meta, &v)
		m.Meta, _ = json.Marshal(v)
	} else {
		m.Meta = nil
	}
	if len(m.Requires) == 0 {
		m.Requires = nil
	}
	if len(m.Files) == 0 {
		m.Files = nil
	}
	for i := range m.Files {
		if len(m.Files[i].Chunks) == 0 {
			m.Files[i].Chunks = nil
		}
	}
	m.Created = m.Created.UTC().Round(0)
	return m
}
