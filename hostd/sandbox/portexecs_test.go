package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/internal/s3test"
)

func withRecorder(o *Options) {
	o.Recorder = recorder.New(recorder.Options{Store: o.Store.(*store.Store), Logger: o.Logger})
}

// TestPortableOpenExecs: an exec that had not ended when its sandbox was
// paused goes, as its start event, with the durable pause to the manager
// that imports the sandbox, whose resume takes it over and records its
// end; open execs out of bounds in the store refuse the import.
func TestPortableOpenExecs(t *testing.T) {
	s3 := s3test.Start(t, portableBucket)
	a := newEnv(t, withStore(portableStore(t, s3), "a"), withRecorder)
	b := newEnv(t, withStore(portableStore(t, s3), "b"), withRecorder)
	ctx := context.Background()
	info := a.create(CreateOptions{})
	frozen, err := a.svc.Execs.StartExec(ctx, info.ID, ExecRequest{Cmd: []string{"sleep", "600"}, TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.m.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	evs, err := b.st.ListEvents(ctx, store.EventQuery{SandboxID: info.ID, Types: []string{recorder.TypeExec}})
	if err != nil || len(evs) == 0 || !strings.Contains(string(evs[0].Data), frozen) {
		t.Fatalf("b's log of the moved sandbox: %v %v, want the start of %s", evs, err, frozen)
	}
	// The fake guest's processes do not outlive a pause (a real guest's
	// do): b takes the exec over and records that its session is gone.
	if d := waitExecEnds(t, b.st, info.ID, frozen)[frozen]; d.Signal != "SIGKILL" && d.Error == "" {
		t.Errorf("the moved exec, once resumed on b: end %+v, want it ended", d)
	}

	bad := []movedExec{
		{Data: recorder.ExecData{Phase: recorder.PhaseStart, Started: time.Now()}},
		{Data: recorder.ExecData{ExecID: "e", Phase: recorder.PhaseEnd, Started: time.Now()}},
		{Data: recorder.ExecData{ExecID: "e", Phase: recorder.PhaseStart, Started: time.Now(), TimeoutS: -1}},
		{Data: recorder.ExecData{ExecID: "e", Phase: recorder.PhaseStart, Started: time.Now(), Argv: make([]string, maxMovedArgv+1)}},
	}
	for _, e := range bad {
		if err := validMovedExecs([]movedExec{e}); err == nil {
			t.Errorf("open exec %+v accepted", e.Data)
		}
	}
	if err := validMovedExecs(make([]movedExec, maxMovedExecs+1)); err == nil {
		t.Error("over maxMovedExecs accepted")
	}
	if err := validMovedExecs([]movedExec{{Data: recorder.ExecData{ExecID: "e", Phase: recorder.PhaseStart, Started: time.Now(), Argv: []string{"ls"}}}}); err != nil {
		t.Errorf("a good open exec refused: %v", err)
	}
	b.close()
	a.close()
}
