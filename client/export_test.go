package client

// ReadEventsForTest exposes readEvents to the external tests.
var ReadEventsForTest = readEvents
