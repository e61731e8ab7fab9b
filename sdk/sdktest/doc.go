// Package sdktest runs the Python and TypeScript SDK suites (sdk/python,
// sdk/typescript) against one real hostd with real VMs. Its test (tag vm)
// starts hostd in-process, cold-boots one sandbox, snapshots it into the
// template the suites start their sandboxes from, then runs pytest and
// node --test as subtests.
package sdktest
