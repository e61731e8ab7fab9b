package commands

import (
	"testing"

	"github.com/agentbox/agentbox/client"
)

func TestParseMounts(t *testing.T) {
	got, err := parseMounts([]string{"/srv/data:/data:ro", "/srv/w:/work", "/srv/x:/x:rw",
		`{"type":"s3","endpoint":"http://127.0.0.1:9000","bucket":"b","prefix":"p/","secret":"keys","path":"/s3","read_only":true}`})
	if err != nil {
		t.Fatal(err)
	}
	want := []client.Mount{
		{Type: client.MountTypeHost, Source: "/srv/data", Path: "/data", ReadOnly: true},
		{Type: client.MountTypeHost, Source: "/srv/w", Path: "/work"},
		{Type: client.MountTypeHost, Source: "/srv/x", Path: "/x"},
		{Type: client.MountTypeS3, Endpoint: "http://127.0.0.1:9000", Bucket: "b", Prefix: "p/", Secret: "keys", Path: "/s3", ReadOnly: true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"/srv", ":/data", "/srv:", "/a:/b:rx", "/a:/b:ro:x", `{"type":`} {
		if _, err := parseMounts([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
