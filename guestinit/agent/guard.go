package agent

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// MaxReply bounds the encoded size of one reply: ttrpc refuses to send a
// message over 4 MiB and then ends the whole connection (every other call
// and stream of the host with it), so a larger reply becomes an error.
const MaxReply = 4<<20 - 64<<10

// ServerOptions are the options of the agent's ttrpc server: every reply
// goes through guardReply.
func ServerOptions() []ttrpc.ServerOpt {
	return []ttrpc.ServerOpt{ttrpc.WithUnaryServerInterceptor(guardReply)}
}

// guardReply keeps any reply from ending the connection: a reply over
// MaxReply becomes a ResourceExhausted error, and an error message that is
// not UTF-8 (a file name's bytes in it) is made valid, since ttrpc could not
// encode it either.
func guardReply(ctx context.Context, unmarshal ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, method ttrpc.Method) (any, error) {
	resp, err := method(ctx, unmarshal)
	if err != nil {
		return nil, validStatus(err)
	}
	if m, ok := resp.(proto.Message); ok {
		if n := proto.Size(m); n > MaxReply {
			return nil, status.Errorf(codes.ResourceExhausted, "agent: reply of %s is %d bytes, more than %d", info.FullMethod, n, MaxReply)
		}
	}
	return resp, nil
}

// validStatus returns err as a status whose message is valid UTF-8.
func validStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return status.New(codes.Unknown, strings.ToValidUTF8(err.Error(), "\uFFFD")).Err()
	}
	if utf8.ValidString(st.Message()) {
		return err
	}
	p := st.Proto()
	p.Message = strings.ToValidUTF8(p.Message, "\uFFFD")
	return status.FromProto(p).Err()
}
