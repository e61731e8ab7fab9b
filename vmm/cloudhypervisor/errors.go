package cloudhypervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/vmm"
)

// Errors that an *APIError unwraps to, one per HTTP status that Cloud
// Hypervisor's spec documents. Match them with errors.Is.
var (
	// ErrBadRequest (400): the request body or the configuration is not
	// valid. An *APIError with it also matches vmm.ErrInvalidConfig.
	ErrBadRequest = errors.New("cloudhypervisor: bad request")
	// ErrNotFound (404): the VM is not created, or no device has the given
	// id. (vm.restore documents 404 for a VM that is already created.)
	ErrNotFound = errors.New("cloudhypervisor: vm or device not found")
	// ErrWrongState (405): the VM is not in a state that allows the action,
	// e.g. pausing a VM that is not booted.
	ErrWrongState = errors.New("cloudhypervisor: vm in wrong state")
	// ErrConflict (409): a device with the same id or path exists.
	ErrConflict = errors.New("cloudhypervisor: conflict")
	// ErrBusy (429): an earlier resize is still pending.
	ErrBusy = errors.New("cloudhypervisor: busy")
	// ErrInternal (500, and any status the spec does not document): the
	// VMM failed to do what was asked.
	ErrInternal = errors.New("cloudhypervisor: vmm error")
)

// APIError is a non-success answer of Cloud Hypervisor's REST API.
type APIError struct {
	// Endpoint is the API path without its /api/v1 prefix, e.g. "vm.pause".
	Endpoint string
	// Status is the HTTP status code.
	Status int
	// Message is Cloud Hypervisor's explanation, if it sent one.
	Message string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("cloudhypervisor: %s: %d %s", e.Endpoint, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the sentinel for e.Status (and vmm.ErrInvalidConfig for 400).
func (e *APIError) Unwrap() []error {
	switch e.Status {
	case http.StatusBadRequest:
		return []error{ErrBadRequest, vmm.ErrInvalidConfig}
	case http.StatusNotFound:
		return []error{ErrNotFound}
	case http.StatusMethodNotAllowed:
		return []error{ErrWrongState}
	case http.StatusConflict:
		return []error{ErrConflict}
	case http.StatusTooManyRequests:
		return []error{ErrBusy}
	}
	return []error{ErrInternal}
}

// newAPIError builds the error for a response with an unexpected status.
// Cloud Hypervisor sends its error chain as a JSON array of strings; any
// other body is kept as text.
func newAPIError(endpoint string, status int, body []byte) *APIError {
	var chain []string
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &chain) == nil {
		msg = strings.Join(chain, ": ")
	}
	const maxMsg = 512
	if len(msg) > maxMsg {
		msg = msg[:maxMsg] + "…"
	}
	return &APIError{Endpoint: endpoint, Status: status, Message: msg}
}
