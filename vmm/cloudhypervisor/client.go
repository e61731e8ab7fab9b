package cloudhypervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// baseURL is the spec's server. The host part is never resolved: every
// connection dials the VMM's --api-socket. The trailing slash matters: the
// generated request builders resolve "./vm.x" against it.
const baseURL = "http://localhost/api/v1/"

// action is a bodyless PUT endpoint of the API.
type action string

const (
	actBoot        action = "vm.boot"
	actPause       action = "vm.pause"
	actResume      action = "vm.resume"
	actShutdownVM  action = "vm.shutdown"
	actDeleteVM    action = "vm.delete"
	actShutdownVMM action = "vmm.shutdown"
)

// restClient speaks Cloud Hypervisor's REST API on one --api-socket, through
// the client that oapi-codegen generated from the pinned spec. Requests that
// carry file descriptors go through putWithFiles instead (see fds.go).
type restClient struct {
	sock string
	hc   *http.Client
	api  *chapi.ClientWithResponses
}

var _ apiClient = (*restClient)(nil)

func newRESTClient(sock string) *restClient {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableCompression: true,
		MaxIdleConns:       2,
		IdleConnTimeout:    30 * time.Second,
	}}
	api, err := chapi.NewClientWithResponses(baseURL, chapi.WithHTTPClient(hc))
	if err != nil {
		// Only a malformed server URL fails here, and baseURL is a constant.
		panic(fmt.Sprintf("cloudhypervisor: %v", err))
	}
	return &restClient{sock: sock, hc: hc, api: api}
}

// response is what every generated *...Response offers.
type response interface {
	StatusCode() int
	GetBody() []byte
}

// check turns a generated response into nil or an *APIError. want lists the
// success statuses; callers' errors from the transport are wrapped with the
// endpoint.
func check(endpoint string, r response, err error, want ...int) error {
	if err != nil {
		return fmt.Errorf("cloudhypervisor: %s: %w", endpoint, err)
	}
	for _, w := range want {
		if r.StatusCode() == w {
			return nil
		}
	}
	return newAPIError(endpoint, r.StatusCode(), r.GetBody())
}

func (c *restClient) Ping(ctx context.Context) (chapi.VmmPingResponse, error) {
	r, err := c.api.GetVmmPingWithResponse(ctx)
	if err := check("vmm.ping", r, err, http.StatusOK); err != nil {
		return chapi.VmmPingResponse{}, err
	}
	var out chapi.VmmPingResponse
	return out, decode("vmm.ping", r.JSON200, r.Body, &out)
}

func (c *restClient) Create(ctx context.Context, cfg chapi.VmConfig) error {
	r, err := c.api.CreateVMWithResponse(ctx, cfg)
	return check("vm.create", r, err, http.StatusNoContent)
}

func (c *restClient) Do(ctx context.Context, a action) error {
	var (
		r   response
		err error
	)
	switch a {
	case actBoot:
		r, err = c.api.BootVMWithResponse(ctx)
	case actPause:
		r, err = c.api.PauseVMWithResponse(ctx)
	case actResume:
		r, err = c.api.ResumeVMWithResponse(ctx)
	case actShutdownVM:
		r, err = c.api.ShutdownVMWithResponse(ctx)
	case actDeleteVM:
		r, err = c.api.DeleteVMWithResponse(ctx)
	case actShutdownVMM:
		r, err = c.api.ShutdownVMMWithResponse(ctx)
	default:
		return fmt.Errorf("cloudhypervisor: unknown action %q", a)
	}
	return check(string(a), r, err, http.StatusNoContent)
}

func (c *restClient) Snapshot(ctx context.Context, destURL string) error {
	r, err := c.api.PutVmSnapshotWithResponse(ctx, chapi.VmSnapshotConfig{DestinationUrl: &destURL})
	return check("vm.snapshot", r, err, http.StatusNoContent)
}

func (c *restClient) Restore(ctx context.Context, cfg restoreConfig, files []*os.File) error {
	body, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("cloudhypervisor: vm.restore: %w", err)
	}
	req, err := chapi.NewPutVmRestoreRequestWithBody(baseURL, "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("cloudhypervisor: vm.restore: %w", err)
	}
	hr, err := c.putWithFiles(ctx, req, files)
	if err != nil {
		return fmt.Errorf("cloudhypervisor: vm.restore: %w", err)
	}
	r, err := chapi.ParsePutVmRestoreResponse(hr)
	return check("vm.restore", r, err, http.StatusNoContent)
}

func (c *restClient) AddNet(ctx context.Context, cfg chapi.NetConfig, files []*os.File) (*chapi.PciDeviceInfo, error) {
	body, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("cloudhypervisor: vm.add-net: %w", err)
	}
	req, err := chapi.NewPutVmAddNetRequestWithBody(baseURL, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("cloudhypervisor: vm.add-net: %w", err)
	}
	hr, err := c.putWithFiles(ctx, req, files)
	if err != nil {
		return nil, fmt.Errorf("cloudhypervisor: vm.add-net: %w", err)
	}
	r, err := chapi.ParsePutVmAddNetResponse(hr)
	if err := check("vm.add-net", r, err, http.StatusOK, http.StatusNoContent); err != nil {
		return nil, err
	}
	if r.StatusCode() == http.StatusNoContent {
		return nil, nil // cold-added to a VM that is not booted: no PCI address yet
	}
	var info chapi.PciDeviceInfo
	return &info, decode("vm.add-net", r.JSON200, r.Body, &info)
}

func (c *restClient) Info(ctx context.Context) (chapi.VmInfo, error) {
	r, err := c.api.GetVmInfoWithResponse(ctx)
	if err := check("vm.info", r, err, http.StatusOK); err != nil {
		return chapi.VmInfo{}, err
	}
	var out chapi.VmInfo
	return out, decode("vm.info", r.JSON200, r.Body, &out)
}

func (c *restClient) Counters(ctx context.Context) (chapi.VmCounters, error) {
	r, err := c.api.GetVmCountersWithResponse(ctx)
	if err := check("vm.counters", r, err, http.StatusOK); err != nil {
		return nil, err
	}
	var out chapi.VmCounters
	return out, decode("vm.counters", r.JSON200, r.Body, &out)
}

// Close drops the idle keep-alive connections to the socket.
func (c *restClient) Close() { c.hc.CloseIdleConnections() }

// decode copies the generated client's parsed body into out, or parses body
// itself when the answer lacked a JSON Content-Type (the generated parser
// only looks at bodies labelled as JSON).
func decode[T any](endpoint string, parsed *T, body []byte, out *T) error {
	if parsed != nil {
		*out = *parsed
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("cloudhypervisor: %s: decode answer: %w", endpoint, err)
	}
	return nil
}
